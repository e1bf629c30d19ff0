import Dashboards
import Foundation
import XCTest

/// The expansion matches what Grafana's PostgreSQL data source sends to the server.
final class GrafanaQueryTests: XCTestCase {
    let from = Date(timeIntervalSince1970: 1_790_000_000)          // 2026-09-21T14:13:20Z
    let to = Date(timeIntervalSince1970: 1_790_000_000 + 86400.25)

    func query(_ variables: [String: GrafanaQuery.Variable] = [:], interval: Double = 3600) -> GrafanaQuery {
        GrafanaQuery(from: from, to: to, interval: interval, variables: variables)
    }

    func testTimeMacros() throws {
        XCTAssertEqual(try query().expand("where $__timeFilter(day)"),
                       "where day BETWEEN '2026-09-21T14:13:20Z' AND '2026-09-22T14:13:20.25Z'")
        XCTAssertEqual(try query().expand("$__timeFrom() .. $__timeTo()"), "'2026-09-21T14:13:20Z' .. '2026-09-22T14:13:20.25Z'")
        XCTAssertEqual(try query().expand("$__unixEpochFilter(t) / $__unixEpochFrom() / $__unixEpochTo()"),
                       "t >= 1790000000 AND t <= 1790086400 / 1790000000 / 1790086400")
        XCTAssertEqual(try query().expand("select $__time(at), $__timeEpoch(at)"),
                       "select at AS \"time\", extract(epoch from at) as \"time\"")
    }

    func testTimeGroup() throws {
        XCTAssertEqual(try query().expand("select $__timeGroupAlias(day, '1d'), x"),
                       "select floor(extract(epoch from day)/86400)*86400 AS \"time\", x")
        XCTAssertEqual(try query().expand("select $__timeGroup(day, 5m) as t from x group by $__timeGroup(day, 5m)"),
                       "select floor(extract(epoch from day)/300)*300 as t from x group by floor(extract(epoch from day)/300)*300")
        // Followed directly by a comma: the aliased form (Grafana's pre-5.3 compatibility).
        XCTAssertEqual(try query().expand("select $__timeGroup(day,1h), x"), "select floor(extract(epoch from day)/3600)*3600 AS \"time\", x")
        // Go prints large float seconds in exponent form.
        XCTAssertEqual(try query().expand("$__timeGroup(day, 30d) as t"), "floor(extract(epoch from day)/2.592e+06)*2.592e+06 as t")
        XCTAssertEqual(try query(interval: 86400 * 2).expand("$__timeGroup(day, $__interval) as t, $__interval_ms"),
                       "floor(extract(epoch from day)/172800)*172800 as t, 172800000")
    }

    func testUnknownMacrosAndBadArgumentsFail() {
        XCTAssertThrowsError(try query().expand("where $__timeFilterr(day)"))
        XCTAssertThrowsError(try query().expand("where $__timeFilter()"))
        XCTAssertThrowsError(try query().expand("select $__timeGroup(day)"))
        XCTAssertThrowsError(try query().expand("select $__timeGroup(day, 1x) as t"))
    }

    func testVariables() throws {
        let variables: [String: GrafanaQuery.Variable] = [
            "app": .all(["a", "o'brien"]),
            "platform": GrafanaQuery.Variable(values: ["ios"], quotesSingleValue: true),
            "name": GrafanaQuery.Variable(values: ["it's"], quotesSingleValue: false),
        ]
        XCTAssertEqual(try query(variables).expand("app in ($app) and platform in (${platform}) and n = '$name'"),
                       "app in ('a','o''brien') and platform in ('ios') and n = 'it''s'")
        XCTAssertEqual(try query(variables).expand("${app:sqlstring} ${app:csv} ${name:sqlstring} [[platform]]"),
                       "'a','o''brien' a,o'brien 'it''s' 'ios'")
        XCTAssertEqual(try query(variables).expand("$unknown stays, $$ too"), "$unknown stays, $$ too")
        XCTAssertThrowsError(try query(variables).expand("${app:json}"))
    }

    /// A custom all value goes in as written, even with no options and whatever the format.
    func testCustomAllValue() throws {
        let variables: [String: GrafanaQuery.Variable] = ["app": .all([], allValue: "'(all)'"), "flow": .all(["a", "b"], allValue: "'(all)'")]
        XCTAssertEqual(try query(variables).expand("('(all)' in ($app) or app in ($app)) and flow in (${flow:sqlstring}) and [[flow]]"),
                       "('(all)' in ('(all)') or app in ('(all)')) and flow in ('(all)') and '(all)'")
        XCTAssertEqual(try query(["app": .all([])]).expand("app in ($app)"), "app in ()")
    }

    func testIntervals() throws {
        XCTAssertEqual(try GrafanaQuery.interval(from: from, to: from.addingTimeInterval(30 * 86400), minInterval: "1d"), 86400)
        XCTAssertEqual(try GrafanaQuery.interval(from: from, to: from.addingTimeInterval(30 * 86400), minInterval: "1m"), 2592)
        XCTAssertEqual(try GrafanaQuery.interval(from: from, to: from.addingTimeInterval(600), minInterval: nil), 1)
        XCTAssertEqual(try query(interval: 2592).expand("$__interval"), "43m")
        XCTAssertEqual(try query(interval: 0.25).expand("$__interval"), "250ms")
        XCTAssertEqual(try query(interval: 86400 * 400).expand("$__interval"), "1y")
    }
}
