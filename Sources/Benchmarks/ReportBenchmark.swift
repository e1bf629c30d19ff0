import Analytics
import Foundation
import Postgres
import Projections
import Reports

/// `permaudit bench report`: report generation (all formats) over a projected log of `events`
/// events vs the physical reference, a plain SELECT of every row of the views the report reads.
public struct ReportBenchmark {
    public var events: Int
    public var sqlDirectory: URL

    public init(events: Int, sqlDirectory: URL) {
        self.events = events
        self.sqlDirectory = sqlDirectory
    }

    static let views = ["events_daily", "intake_anomalies_daily", "permission_outcomes_daily", "priming_arms_daily",
                        "experiment_arms_detail_daily", "picker_adoption_daily", "picker_adoption_detail_daily", "permission_state"]

    public struct Result: Sendable {
        public var rows: [BenchmarkRow]
        public var clientPeakMiB: Double
    }

    public func run(_ context: BenchmarkContext) throws -> Result {
        let url = try context.freshDatabase("permaudit_bench_report", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_report") }
        let db = try Connection(url: url)
        context.log("loading \(events) events into the log")
        try SyntheticEvents.copy(events, into: db, seed: 7)
        context.log("projecting")
        try Projector(connection: db).catchUp()
        try db.execute("analyze")

        context.log("plain SELECT of the views")
        var rows = 0
        let select = try ProjectionBenchmark.median(runs: 3) {
            rows = 0
            for view in Self.views { rows += try db.query("select * from analytics.\(view)").count }
        }
        context.log("report, all formats")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("permaudit-bench-report-\(getpid())")
        defer { try? FileManager.default.removeItem(at: directory) }
        var tables = 0
        let report = try ProjectionBenchmark.median(runs: 3) {
            let report = try Report.build(db, filters: StatsQuery())
            tables = report.tables.count
            try ReportWriter(report).write(ReportWriter.Format.allCases, to: directory)
        }
        return Result(rows: [
            BenchmarkRow(name: "plain SELECT * of the \(Self.views.count) views the report reads (reference)", count: rows, seconds: select,
                         note: "view rows"),
            BenchmarkRow(name: "permaudit report, md + html + csv + json", count: tables, seconds: report, note: "tables"),
        ], clientPeakMiB: peakResidentMiB())
    }
}
