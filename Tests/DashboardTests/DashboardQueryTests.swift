import Analytics
import Benchmarks
import Dashboards
import EventLog
import Foundation
import Postgres
import Projections
import TestSupport
import XCTest

/// Every panel of every dashboard, expanded as Grafana expands it, runs as permaudit_analyst on a
/// simulated and projected log, returns rows, and has the columns its panel format needs.
final class DashboardQueryTests: DatabaseTestCase {
    static var dashboardsDirectory: URL { TestDatabase.packageRoot.appendingPathComponent("dashboards/dashboards") }

    /// 20,000 synthetic events (about 14 hours of attempts from 2026-09-21), projected; a few
    /// duplicates and rejections through the real write path; the range covers both the
    /// attempt days and the minutes the events were recorded in (now).
    func simulatedLog() throws -> (db: Connection, from: Date, to: Date) {
        let db = try Connection(url: url)
        try SyntheticEvents.copy(20_000, into: db, seed: 3)
        // The COPY used stream keys 0..<1000 without link rows; the write path's keys start above.
        try db.execute("alter table audit.subject_streams alter column stream_key restart with 1000000")
        let log = EventLog(connection: db)
        let event = EventFixtures.event(subject: "dashboard-test", app: "com.example.snap")
        try log.append([event])
        try log.append([event])  // a duplicate, counted by the write path
        try db.query("select audit.record_rejected(current_date, $1, $2, 2)", ["com.example.snap", "ios"])
        try Projector(connection: try Connection(url: url)).catchUp()
        let first: Date = try db.query("select min(day)::timestamp at time zone 'UTC' from analytics.events_daily").scalar()
        return (db, first.addingTimeInterval(-86400), Date().addingTimeInterval(3600))
    }

    func testTheDashboardsAreWellFormed() throws {
        let dashboards = try Dashboard.load(directory: Self.dashboardsDirectory)
        XCTAssertEqual(Set(dashboards.map(\.uid)), ["permaudit-outcomes", "permaudit-priming", "permaudit-picker", "permaudit-health"])
        for dashboard in dashboards {
            XCTAssertFalse(dashboard.targets.isEmpty, dashboard.file)
            // Flow on every dashboard whose views have it (the health dashboard's intake has none).
            XCTAssertTrue(Set(dashboard.variables.map(\.name)).isSuperset(of: dashboard.uid == "permaudit-health" ? ["app", "platform"] : ["app", "platform", "flow"]),
                          dashboard.file)
            for variable in dashboard.variables {
                let label = "\(dashboard.file): \(variable.name)"
                XCTAssertTrue(variable.multi && variable.includeAll, label)
                // "All" is a custom value, so that it stands for every value even when the option
                // list is empty or older than the data; it is a SQL literal that no app, platform or
                // flow can equal (the contract allows [A-Za-z0-9._-] only).
                let allValue = try XCTUnwrap(variable.allValue, label)
                XCTAssertTrue(allValue.hasPrefix("'") && allValue.hasSuffix("'") && allValue.count > 2, label)
                XCTAssertNotNil(allValue.dropFirst().dropLast().range(of: "[^A-Za-z0-9._-]", options: .regularExpression), label)
                XCTAssertFalse(allValue.dropFirst().dropLast().contains("'"), label)
                XCTAssertEqual(variable.refresh, 2, "\(label): options reloaded on time range change")
                // Only the analytics views; where the app and platform options come from the log
                // intake, they include events the projector has not reached.
                XCTAssertFalse(variable.query.contains("audit.") || variable.query.contains("projection."), label)
                if ["app", "platform"].contains(variable.name) { XCTAssertTrue(variable.query.contains("analytics.log_intake_"), label) }
            }
            for target in dashboard.targets {
                let label = "\(dashboard.file): \(target.panelTitle)"
                XCTAssertEqual(target.datasourceUID, "permaudit-postgres", label)
                XCTAssertEqual(target.format, target.panelType == "timeseries" ? "time_series" : "table", label)
                // Panels read the analytics schema only (the analyst could read nothing else anyway).
                for schema in ["audit.", "projection.", "pg_catalog."] {
                    XCTAssertFalse(target.rawSQL.contains(schema), "\(label) reads \(schema)")
                }
                if target.panelType == "timeseries" { XCTAssertTrue(target.rawSQL.contains("$__timeGroup") || target.rawSQL.contains("\"time\""), label) }
            }
        }
        let health = try XCTUnwrap(dashboards.first { $0.uid == "permaudit-health" })
        for view in ["analytics.log_intake_minutely", "analytics.log_intake_hourly", "analytics.intake_anomalies_minutely", "analytics.projector_lag"] {
            XCTAssertTrue(health.targets.contains { $0.rawSQL.contains(view) }, view)
        }
    }

    func testEveryPanelRunsAsTheAnalystWithAllSelected() throws {
        let (db, from, to) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        let queries = try PanelQuery.all(try Dashboard.load(directory: Self.dashboardsDirectory), on: db, from: from, to: to)
        XCTAssertGreaterThanOrEqual(queries.count, 20)
        for query in queries {
            let label = "\(query.dashboard): \(query.target.panelTitle)"
            XCTAssertFalse(query.sql.contains("$"), "\(label): unexpanded \(query.sql)")
            let result: QueryResult
            do { result = try db.query(query.sql) } catch { XCTFail("\(label): \(error)\n\(query.sql)"); continue }
            XCTAssertGreaterThan(result.count, 0, label)
            try assertShape(result, format: query.target.format, label: label)
        }
    }

    /// "All" (the custom all value) selects what listing every option selects.
    func testAllStandsForEveryValue() throws {
        let (db, from, to) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        for dashboard in try Dashboard.load(directory: Self.dashboardsDirectory) {
            var custom: [String: GrafanaQuery.Variable] = [:], listed: [String: GrafanaQuery.Variable] = [:]
            for variable in dashboard.variables {
                let options = try db.query(variable.query).column(as: String.self)
                custom[variable.name] = .all(options, allValue: variable.allValue)
                listed[variable.name] = .all(options)
            }
            for target in dashboard.targets {
                func rows(_ variables: [String: GrafanaQuery.Variable]) throws -> [[String?]] {
                    let result = try db.query(try GrafanaQuery.forTarget(target, from: from, to: to, variables: variables).expand(target.rawSQL))
                    return (0..<result.count).map { row in result.columns.indices.map { result[row, $0] } }
                }
                XCTAssertEqual(try rows(custom), try rows(listed), "\(dashboard.file): \(target.panelTitle)")
            }
        }
    }

    /// On an empty log the option lists are empty and every panel still runs with "All"; with
    /// events not projected yet (a fresh deploy, a rebuild), the app and platform options come from
    /// the log intake and the intake panels count those events.
    func testAllWorksOnAnEmptyLogAndBeforeTheProjector() throws {
        let db = try Connection(url: url)
        let dashboards = try Dashboard.load(directory: Self.dashboardsDirectory)
        let from = Date().addingTimeInterval(-3 * 3600), to = Date().addingTimeInterval(3600)
        func panels() throws -> [(label: String, result: QueryResult)] {
            try PanelQuery.all(dashboards, on: db, from: from, to: to).map { query in
                let label = "\(query.dashboard): \(query.target.panelTitle)"
                do { return (label, try db.query(query.sql)) } catch { XCTFail("\(label): \(error)\n\(query.sql)"); throw error }
            }
        }
        try db.execute("set role permaudit_analyst")
        for dashboard in dashboards {
            for variable in dashboard.variables { XCTAssertEqual(try db.query(variable.query).count, 0, "\(dashboard.file): \(variable.name)") }
        }
        _ = try panels()

        try db.execute("reset role")
        try EventLog(connection: db).append([EventFixtures.event(subject: "fresh", app: "com.example.fresh")])
        try db.query("select audit.record_rejected(null, $1, $2, 3)", ["com.example.rejects-only", "ios"])
        try db.execute("set role permaudit_analyst")
        for dashboard in dashboards {
            for variable in dashboard.variables where ["app", "platform"].contains(variable.name) {
                let options = Set(try db.query(variable.query).column(as: String.self))
                XCTAssertEqual(options, variable.name == "app" ? ["com.example.fresh", "com.example.rejects-only"] : ["android", "ios"],
                               "\(dashboard.file): \(variable.name)")
            }
        }
        let results = try panels()
        for title in ["Events appended per minute", "Duplicates and rejects per minute"] {
            let result = try XCTUnwrap(results.first { $0.label.hasSuffix(": " + title) }, title).result
            XCTAssertGreaterThan(result.count, 0, title)
        }
    }

    /// Ranges up to a day read the minute counts, longer ones the hour counts.
    func testEventsPerMinuteOverShortAndLongRanges() throws {
        let (db, from, to) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        let health = try Dashboard.load(directory: Self.dashboardsDirectory).filter { $0.uid == "permaudit-health" }
        for start in [to.addingTimeInterval(-3 * 3600), from] {
            let query = try XCTUnwrap(try PanelQuery.all(health, on: db, from: start, to: to).first { $0.target.panelTitle == "Events appended per minute" })
            let rows = try db.query(query.sql).decode((Double, Double).self)
            let interval = try GrafanaQuery.interval(from: start, to: to, minInterval: query.target.minInterval)
            let seconds = max(interval, start == from ? 3600 : 60)
            XCTAssertFalse(rows.isEmpty, query.sql)
            XCTAssertTrue(rows.allSatisfy { $0.0.truncatingRemainder(dividingBy: seconds) == 0 }, "buckets of \(seconds) s")
            // 20,003 events stored in one transaction (one minute) plus two appends: the bucket's average per minute.
            XCTAssertEqual(rows.map { $0.1 * seconds / 60 }.reduce(0, +), 20_001, accuracy: 1)
        }
    }

    /// Duplicates and rejects are per minute too: a bucket's count over its minutes, whatever
    /// the interval.
    func testDuplicatesAndRejectsPerMinuteOverShortAndLongRanges() throws {
        let (db, _, to) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        let health = try Dashboard.load(directory: Self.dashboardsDirectory).filter { $0.uid == "permaudit-health" }
        for start in [to.addingTimeInterval(-3 * 3600), to.addingTimeInterval(-3 * 86400)] {
            let query = try XCTUnwrap(try PanelQuery.all(health, on: db, from: start, to: to).first { $0.target.panelTitle == "Duplicates and rejects per minute" })
            let rows = try db.query(query.sql).decode((Double, Double, Double).self)
            let seconds = max(try GrafanaQuery.interval(from: start, to: to, minInterval: query.target.minInterval), 60)
            XCTAssertFalse(rows.isEmpty, query.sql)
            XCTAssertTrue(rows.allSatisfy { $0.0.truncatingRemainder(dividingBy: seconds) == 0 }, "buckets of \(seconds) s")
            // One duplicate and two rejected events, recorded now; the panel rounds to 0.001 per minute.
            let rounding = 0.0005 * seconds / 60 * Double(rows.count)
            XCTAssertEqual(rows.map { $0.1 * seconds / 60 }.reduce(0, +), 1, accuracy: rounding, "duplicates in buckets of \(seconds) s")
            XCTAssertEqual(rows.map { $0.2 * seconds / 60 }.reduce(0, +), 2, accuracy: rounding, "rejected in buckets of \(seconds) s")
        }
    }

    /// The late-events panel shows the days of occurredAt that the range touches: a few hours
    /// within a day (the health dashboard's default is 6 hours) show that day.
    func testLateEventsOverAFewHoursShowTheirDay() throws {
        let (db, from, _) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        let health = try Dashboard.load(directory: Self.dashboardsDirectory).filter { $0.uid == "permaudit-health" }
        // The synthetic events occur from 2026-09-21 14:13 UTC; from + 1 day is that day's midnight.
        let start = from.addingTimeInterval(86400 + 15 * 3600)
        let query = try XCTUnwrap(try PanelQuery.all(health, on: db, from: start, to: start.addingTimeInterval(6 * 3600)).first { $0.target.panelTitle == "Late events" })
        let days = try db.query(query.sql).decode((Double, String, Double).self).map(\.0)
        XCTAssertEqual(Set(days), [from.addingTimeInterval(86400).timeIntervalSince1970], query.sql)
    }

    func testSingleAndMultipleSelections() throws {
        let (db, from, to) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        for dashboard in try Dashboard.load(directory: Self.dashboardsDirectory) {
            var options: [String: [String]] = [:]
            for variable in dashboard.variables { options[variable.name] = try db.query(variable.query).column(as: String.self) }
            XCTAssertGreaterThanOrEqual(options["app"]?.count ?? 0, 2)
            // One value of each (still quoted: the variables are multi-value), then two of each.
            // Some cuts are legitimately empty (no pre-permission screens on Android in the
            // synthetic data, anomalies for one app only), so most panels, not all, have rows.
            for take in [1, 2] {
                let variables = options.mapValues { GrafanaQuery.Variable(values: Array($0.prefix(take)), quotesSingleValue: true) }
                var withRows = 0
                for target in dashboard.targets {
                    let sql = try GrafanaQuery.forTarget(target, from: from, to: to, variables: variables).expand(target.rawSQL)
                    let label = "\(dashboard.file): \(target.panelTitle), \(take) value(s)"
                    do {
                        let result = try db.query(sql)
                        if result.count > 0 { withRows += 1 }
                        try assertShape(result, format: target.format, label: label)
                    } catch { XCTFail("\(label): \(error)\n\(sql)") }
                }
                XCTAssertGreaterThanOrEqual(withRows, dashboard.targets.count - 1, "\(dashboard.file), \(take) value(s)")
            }
        }
    }

    /// The contract's statistics of an arm against its baseline (domain section 4), as the report
    /// computes them: Wilson 95% interval, difference with its unpooled Wald 95% interval, relative
    /// lift, pooled z-test p-value, the too-small flag; the panel rounds to 0.1 points (p-value 1e-4).
    func assertStatistics(_ row: [String: String?], arm: Proportion, baseline: Proportion, label: String) throws {
        func number(_ column: String) throws -> Double? {
            let text = try XCTUnwrap(row[column], "\(label): no column \(column) in \(row.keys.sorted())")
            return text.flatMap(Double.init)
        }
        let comparison = try XCTUnwrap(Statistics.compare(arm, baseline: baseline), label)
        let wilson = try XCTUnwrap(Statistics.wilson(arm), label)
        let expected: [(String, Double?)] = [
            ("95% low %", 100 * wilson.low), ("95% high %", 100 * wilson.high),
            ("difference (points)", 100 * comparison.difference),
            ("difference 95% low (points)", 100 * comparison.differenceInterval.low),
            ("difference 95% high (points)", 100 * comparison.differenceInterval.high),
            ("lift %", comparison.relativeLift.map { 100 * $0 }),
        ]
        for (column, value) in expected {
            let shown = try number(column)
            XCTAssertEqual(shown == nil, value == nil, "\(label): \(column)")
            if let shown, let value { XCTAssertEqual(shown, value, accuracy: 0.051, "\(label): \(column)") }
        }
        if let p = try number("p-value"), let value = comparison.pValue { XCTAssertEqual(p, value, accuracy: 0.0001, "\(label): p-value") }
        XCTAssertEqual(row["too small to judge"] ?? nil, arm.isTooSmall ? "t" : "f", "\(label): too small to judge")
    }

    /// The rows of a panel's query with every variable at "All", by column name.
    func rows(of panelTitle: String, in uid: String, db: Connection, from: Date, to: Date) throws -> [[String: String?]] {
        let dashboard = try Dashboard.load(directory: Self.dashboardsDirectory).filter { $0.uid == uid }
        let query = try XCTUnwrap(try PanelQuery.all(dashboard, on: db, from: from, to: to).first { $0.target.panelTitle == panelTitle }, panelTitle)
        let result = try db.query(query.sql)
        return (0..<result.count).map { row in
            Dictionary(uniqueKeysWithValues: result.columns.enumerated().map { ($0.element, result[row, $0.offset]) })
        }
    }

    /// The contract keys experiment arms by (app, experiment, variant) and priming arms by (app,
    /// platform, permission, arm): with every app selected, each row is one app's arm, compared
    /// with the baseline of the same app (the synthetic apps all run the same experiment key, so
    /// pooling them would give other counts and other lifts), with the contract's statistics.
    func testArmsAreComparedWithinAnApp() throws {
        let (db, from, to) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        let experiments: [[String: String?]] = try rows(of: "Experiment arms: access rate, interval and lift", in: "permaudit-priming", db: db, from: from, to: to)
        let primed: [[String: String?]] = try rows(of: "Primed vs unprimed: access rate, interval and lift", in: "permaudit-priming", db: db, from: from, to: to)
        for (table, keys, baseline, view) in [
            (experiments, ["app", "experiment", "variant"], ("variant", "control"), "analytics.experiment_arms"),
            (primed, ["app", "platform", "permission", "arm"], ("arm", "unprimed"), "analytics.priming_arms"),
        ] {
            XCTAssertGreaterThanOrEqual(Set(table.compactMap { $0["app"] ?? nil }).count, 2, "\(view): arms of several apps")
            XCTAssertEqual(Set(table.map { row in keys.map { row[$0] ?? nil } }).count, table.count, "\(view): one row per \(keys)")
            let counts = try db.query("select \(keys.joined(separator: ", ")), attempts, granted + limited from \(view)")
            var expected: [[String?]: (n: Double, x: Double)] = [:]
            for row in 0..<counts.count {
                expected[keys.indices.map { counts[row, $0] }] = (try counts.value(row, keys.count, as: Double.self), try counts.value(row, keys.count + 1, as: Double.self))
            }
            XCTAssertEqual(expected.count, table.count, view)
            for row in table {
                let key = keys.map { row[$0] ?? nil }
                let arm = try XCTUnwrap(expected[key], "\(key)")
                XCTAssertEqual(Double(row["attempts"]! ?? ""), arm.n, "\(key)")
                guard row[baseline.0] != baseline.1 else { continue }
                // The baseline is the same app's (and platform's and permission's) arm.
                var baseKey = key
                baseKey[keys.firstIndex(of: baseline.0)!] = baseline.1
                guard let base = expected[baseKey] else { continue }
                try assertStatistics(row, arm: Proportion(Int(arm.x), of: Int(arm.n)), baseline: Proportion(Int(base.x), of: Int(base.n)),
                                     label: "\(key) against \(baseKey)")
            }
        }
        // The time series name each arm with its app.
        let apps = try db.query("select distinct app from analytics.experiment_arms").column(as: String.self)
        for title in ["Access rate by experiment variant", "Denial at the dialog, primed vs unprimed"] {
            let labels = try rows(of: title, in: "permaudit-priming", db: db, from: from, to: to).compactMap { $0["arm"] ?? nil }
            XCTAssertFalse(labels.isEmpty, title)
            for label in labels { XCTAssertTrue(apps.contains { label.hasPrefix($0 + " ") || label.hasPrefix($0 + ":") }, "\(title): \(label) names no app") }
        }
    }

    /// The flow variable splits the priming dashboard's arms: the arms of each flow alone (and of
    /// the attempts without one, "(none)", where there are such) add up to the arms with every flow.
    func testEachFlowsArmsAddUpToAllFlows() throws {
        let (db, from, to) = try simulatedLog()
        try db.execute("set role permaudit_analyst")
        let dashboard = try XCTUnwrap(try Dashboard.load(directory: Self.dashboardsDirectory).first { $0.uid == "permaudit-priming" })
        let flows = try db.query(try XCTUnwrap(dashboard.variables.first { $0.name == "flow" }).query).column(as: String.self)
        XCTAssertGreaterThanOrEqual(flows.count, 3, "\(flows)")
        for title in ["Primed vs unprimed: access rate, interval and lift", "Experiment arms: access rate, interval and lift"] {
            let target = try XCTUnwrap(dashboard.targets.first { $0.panelTitle == title })
            func attempts(_ flow: GrafanaQuery.Variable) throws -> [String: Int] {
                let variables: [String: GrafanaQuery.Variable] = ["app": .all([], allValue: "'(all)'"), "platform": .all([], allValue: "'(all)'"), "flow": flow]
                let result = try db.query(try GrafanaQuery.forTarget(target, from: from, to: to, variables: variables).expand(target.rawSQL))
                let n = try XCTUnwrap(result.columns.firstIndex(of: "attempts"))
                var sums: [String: Int] = [:]
                for row in 0..<result.count {
                    let key = (0..<n).map { result[row, $0] ?? "NULL" }.joined(separator: "|")
                    sums[key, default: 0] += try result.value(row, n, as: Int.self)
                }
                return sums
            }
            let all = try attempts(.all([], allValue: "'(all)'"))
            XCTAssertFalse(all.isEmpty, title)
            var summed: [String: Int] = [:]
            for flow in flows {
                for (key, n) in try attempts(GrafanaQuery.Variable(values: [flow], quotesSingleValue: true)) { summed[key, default: 0] += n }
            }
            XCTAssertEqual(summed, all, title)
        }
    }

    /// A time series frame needs a `time` column and a numeric value; a table any columns.
    func assertShape(_ result: QueryResult, format: String, label: String) throws {
        XCTAssertFalse(result.columns.isEmpty, label)
        XCTAssertEqual(Set(result.columns).count, result.columns.count, "\(label): duplicate column names \(result.columns)")
        guard format == "time_series" else { return }
        let time = try XCTUnwrap(result.columns.firstIndex(of: "time"), "\(label): no time column in \(result.columns)")
        guard result.count > 0 else { return }
        for row in 0..<result.count { XCTAssertNotNil(result[row, time], "\(label): NULL time") }
        let numeric = result.columns.indices.filter { column in
            column != time && (0..<result.count).contains { row in result[row, column].flatMap(Double.init) != nil }
        }
        XCTAssertFalse(numeric.isEmpty, "\(label): no numeric value column in \(result.columns)")
        let times = try (0..<result.count).map { try result.value($0, time, as: Double.self) }
        XCTAssertEqual(times, times.sorted(), "\(label): rows not ordered by time")
    }
}
