import Analytics
import EventLog
import Foundation
import Postgres
import Projections
import TestSupport
import XCTest

/// Migration 009: the operations views the log-health dashboard reads, and the statistics
/// functions the experiment panels use.
final class OperationsViewTests: DatabaseTestCase {
    let intakeTotal = "select coalesce(sum(events), 0)::bigint from analytics.log_intake_minutely"
    let hourlyTotal = "select coalesce(sum(events), 0)::bigint from analytics.log_intake_hourly"
    let rollup = """
        select 'minute', minute::text, app, platform, events from projection.intake_minutely
        union all
        select 'hour', hour::text, app, platform, events from projection.intake_hourly
        order by 1, 2, 3, 4
        """

    func testIntakePerMinuteCountsProjectedAndUnprojectedEventsOnce() throws {
        let db = try Connection(url: url)
        let log = EventLog(connection: db)
        var random = RandomEvents(seed: 9)
        try log.append(Array(random.events(attempts: 100, subjects: 20).prefix(150)))
        XCTAssertEqual(try db.query(intakeTotal).scalar(Int.self), 150, "not projected yet: counted from the log")
        XCTAssertEqual(try db.query(hourlyTotal).scalar(Int.self), 150)
        let projector = Projector(connection: try Connection(url: url))
        projector.batchSize = 40  // several batches
        projector.buildsEmptyProjectionInOnePass = false
        try projector.catchUp()
        XCTAssertEqual(try db.query(intakeTotal).scalar(Int.self), 150)
        XCTAssertEqual(try db.query("select sum(events)::int from projection.intake_minutely").scalar(Int.self), 150)
        XCTAssertEqual(try db.query("select sum(events)::int from projection.intake_hourly").scalar(Int.self), 150)

        let lag = try db.query("select events_behind, lag_seconds from analytics.projector_lag").decode((Int, Double).self)
        XCTAssertEqual(lag.first?.0, 0)
        XCTAssertEqual(lag.first?.1, 0)
        try log.append(Array(random.events(attempts: 20, subjects: 5).prefix(30)))
        XCTAssertEqual(try db.query(intakeTotal).scalar(Int.self), 180)
        XCTAssertEqual(try db.query(hourlyTotal).scalar(Int.self), 180)
        XCTAssertEqual(try db.query("select events_behind from analytics.projector_lag").scalar(Int.self), 30)

        try projector.catchUp()
        let incremental = try db.query(rollup).decode((String, String, String, String, Int).self).map { "\($0)" }
        projector.buildsEmptyProjectionInOnePass = true  // the rebuild in one pass
        try projector.rebuild()
        XCTAssertEqual(try db.query(rollup).decode((String, String, String, String, Int).self).map { "\($0)" }, incremental,
                       "a rebuild gives the same minute counts")
        XCTAssertEqual(try db.query(intakeTotal).scalar(Int.self), 180)
    }

    func testAnomaliesPerMinuteAndTheAnalystsView() throws {
        let db = try Connection(url: url)
        let event = EventFixtures.event(subject: "ops")
        let log = EventLog(connection: db)
        try log.append([event])
        try log.append([event, event])
        try db.query("select audit.record_rejected(null, null, null, 3)")
        try db.execute("set role permaudit_analyst")
        let rows = try db.query("""
            select sum(duplicates)::int, sum(rejected)::int, count(distinct minute)::int from analytics.intake_anomalies_minutely
             where minute > now() - interval '1 hour'
            """).decode((Int, Int, Int).self)
        XCTAssertEqual(rows.first?.0, 2)
        XCTAssertEqual(rows.first?.1, 3)
        XCTAssertEqual(try db.query("select count(*)::int from analytics.projector_lag").scalar(Int.self), 1)
        XCTAssertEqual(try db.query(intakeTotal).scalar(Int.self), 1)
        for forbidden in ["select * from projection.intake_minutely", "select * from projection.checkpoint",
                          "select * from projection.unprojected_events()"] {
            XCTAssertThrowsError(try db.query(forbidden), forbidden) { error in
                XCTAssertEqual((error as? PostgresError)?.code, .insufficientPrivilege, "\(forbidden): \(error)")
            }
        }
    }

    func testStatisticsFunctionsAgreeWithTheReportsStatistics() throws {
        let db = try Connection(url: url)
        try db.execute("set role permaudit_analyst")
        // 70,900 and 7,090: |z| of 39.8 and 26.3, where exp(-z^2/2) underflows (036) or nearly does; then
        // small p-values, where an absolute error would hide a wrong value (038).
        for (x, n, x0, n0) in [(40, 100, 30, 100), (3, 10, 9, 10), (512, 1000, 498, 1000), (0, 50, 1, 60), (50, 50, 20, 40),
                               (70_900, 100_000, 47_800, 100_000), (7_090, 10_000, 5_280, 10_000),
                               (0, 10, 5, 10), (700, 1000, 500, 1000), (60, 100, 30, 100), (1, 2, 2, 2), (201, 400, 200, 400)] {
            let row = try db.query("""
                select analytics.wilson_low($1, $2), analytics.wilson_high($1, $2), analytics.pooled_p_value($1, $2, $3, $4)
                """, [x, n, x0, n0]).decode((Double, Double, Double?).self)[0]
            let interval = try XCTUnwrap(Statistics.wilson(Proportion(x, of: n)))
            XCTAssertEqual(row.0, interval.low, accuracy: 1e-12)
            XCTAssertEqual(row.1, interval.high, accuracy: 1e-12)
            let comparison = try XCTUnwrap(Statistics.compare(Proportion(x, of: n), baseline: Proportion(x0, of: n0)))
            if let expected = comparison.pValue {
                XCTAssertEqual(try XCTUnwrap(row.2), expected, accuracy: max(expected * 1e-12, 1e-290), "\(x)/\(n) vs \(x0)/\(n0)")
            } else {
                XCTAssertNil(row.2)
            }
        }
        let empty = try db.query("select analytics.wilson_low(0, 0), analytics.pooled_p_value(0, 0, 1, 2), analytics.pooled_p_value(0, 5, 0, 5)")
        XCTAssertEqual((0..<3).map { empty[0, $0] }, [nil, nil, nil])
    }
}
