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
final class DashboardQueryTests: XCTestCase {
    var url = ""
    override func setUpWithError() throws { url = try TestDatabase.create() }
    override func tearDown() { TestDatabase.drop(url) }

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
            XCTAssertTrue(Set(dashboard.variables.map(\.name)).isSuperset(of: ["app", "platform"]), dashboard.file)
            for variable in dashboard.variables {
                XCTAssertTrue(variable.multi && variable.includeAll, "\(dashboard.file): \(variable.name)")
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
