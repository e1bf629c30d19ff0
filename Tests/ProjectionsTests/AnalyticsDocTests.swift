import EventLog
import Foundation
import Postgres
import Projections
import TestSupport
import XCTest

/// Every example query of docs/analytics.md runs, as the analyst role, on projected data; the
/// analyst role reads the views and nothing else.
final class AnalyticsDocTests: DatabaseTestCase {
    static func exampleQueries() throws -> [String] { try TestDatabase.sqlBlocks(ofDocument: "docs/analytics.md") }

    func testEveryExampleQueryRunsAsTheAnalyst() throws {
        let db = try Connection(url: url)
        var random = RandomEvents(seed: 5)
        try EventLog(connection: db).append(random.events(attempts: 400, subjects: 60))
        try Projector(connection: try Connection(url: url)).catchUp()
        let queries = try Self.exampleQueries()
        XCTAssertGreaterThanOrEqual(queries.count, 10)
        try db.execute("set role permaudit_analyst")
        var withRows = 0
        for query in queries {
            do {
                let rows = try db.query(query)
                if rows.count > 0 { withRows += 1 }
            } catch {
                XCTFail("\(error)\n\(query)")
            }
        }
        XCTAssertGreaterThanOrEqual(withRows, queries.count - 2, "most examples return rows on simulated data")
    }

    /// "Data quality per week" counts every duplicate and reject of intake_anomalies_daily, also
    /// those with no day, of an app without stored events, or of a day without stored events.
    func testDataQualityPerWeekCountsEveryAnomaly() throws {
        let db = try Connection(url: url)
        var random = RandomEvents(seed: 5)
        let events = random.events(attempts: 100, subjects: 20)
        let log = EventLog(connection: db)
        try log.append(events)
        try log.append([events[0]])  // a duplicate
        for (day, app, platform) in [(nil, nil, nil), (nil, "com.example.a", "ios"), ("2020-01-06", "com.example.a", "ios"),
                                     ("2026-09-21", "com.example.unknown", "android")] as [(String?, String?, String?)] {
            try db.query("select audit.record_rejected($1::date, $2, $3, 3)", [day, app, platform])
        }
        try Projector(connection: try Connection(url: url)).catchUp()
        let query = try XCTUnwrap(try Self.exampleQueries().first { $0.contains("intake_anomalies_daily") && $0.contains("late_events") })
        try db.execute("set role permaudit_analyst")
        let totals = try db.query("select coalesce(sum(events), 0)::bigint, coalesce(sum(late_events), 0)::bigint, coalesce(sum(duplicates), 0)::bigint, coalesce(sum(rejected), 0)::bigint from (\(query.replacingOccurrences(of: ";", with: ""))) as weeks")
            .decode((Int, Int, Int, Int).self)[0]
        let expected = try db.query("""
            select (select coalesce(sum(events), 0) from analytics.events_daily)::bigint, (select coalesce(sum(late_events), 0) from analytics.events_daily)::bigint,
                   (select coalesce(sum(duplicates), 0) from analytics.intake_anomalies_daily)::bigint, (select coalesce(sum(rejected), 0) from analytics.intake_anomalies_daily)::bigint
            """).decode((Int, Int, Int, Int).self)[0]
        XCTAssertEqual(expected.3, 12)
        XCTAssertEqual(expected.2, 1)
        XCTAssertTrue(totals == expected, "\(totals) != \(expected)")
    }

    func testTheAnalystReadsTheViewsAndNothingElse() throws {
        let db = try Connection(url: url)
        try db.execute("set role permaudit_analyst")
        for view in ["permission_outcomes_daily", "priming_arms", "priming_arms_daily", "experiment_arms", "experiment_arms_daily",
                     "picker_adoption_daily", "permission_state"] {
            XCTAssertNoThrow(try db.query("select * from analytics.\(view) limit 1"), view)
        }
        for forbidden in ["select * from audit.events limit 1", "select * from audit.subject_streams limit 1",
                          "select * from projection.attempts limit 1", "select * from projection.outcomes_daily limit 1",
                          "select * from audit.append_events('[]')", "select * from projection.apply_batch(1)",
                          "select * from projection.build_from_log()"] {
            XCTAssertThrowsError(try db.query(forbidden), forbidden) { error in
                XCTAssertEqual((error as? PostgresError)?.code, .insufficientPrivilege, "\(forbidden): \(error)")
            }
        }
    }
}
