import Dashboards
import EventLog
import Foundation
import Postgres
import Projections

/// Every panel query of the Grafana dashboards, expanded the way Grafana expands it.
public struct PanelQuery: Sendable {
    public var dashboard: String
    public var target: Dashboard.Target
    public var sql: String

    /// Every target of `dashboards` for the range [from, to] with each variable at "All" (its
    /// custom all value, or its options read by running the variable's query on `db`, as
    /// whatever role `db` has).
    public static func all(_ dashboards: [Dashboard], on db: Connection, from: Date, to: Date) throws -> [PanelQuery] {
        try dashboards.flatMap { dashboard -> [PanelQuery] in
            var variables: [String: GrafanaQuery.Variable] = [:]
            for variable in dashboard.variables {
                variables[variable.name] = .all(try db.query(variable.query).column(as: String.self), allValue: variable.allValue)
            }
            return try dashboard.targets.map { target in
                let query = try GrafanaQuery.forTarget(target, from: from, to: to, variables: variables)
                return PanelQuery(dashboard: dashboard.title, target: target, sql: try query.expand(target.rawSQL))
            }
        }
    }
}

/// `permaudit bench dashboards`: every dashboard panel's query as the analyst, over a 30-day
/// range with every variable at "All", on a log of `events` synthetic events (recorded as they
/// occurred, so the log-health panels have minutes to show), projected; beside a plain
/// `SELECT count(*)` of the log as the reference.
public struct DashboardBenchmark {
    public var events: Int
    public var sqlDirectory: URL
    public var dashboardsDirectory: URL
    public var runs = 5

    public init(events: Int, sqlDirectory: URL, dashboardsDirectory: URL) {
        self.events = events
        self.sqlDirectory = sqlDirectory
        self.dashboardsDirectory = dashboardsDirectory
    }

    public struct Row: Sendable {
        public var dashboard: String
        public var panel: String
        public var rows: Int
        public var milliseconds: Double
    }

    public struct Result: Sendable {
        public var from: Date
        public var to: Date
        public var referenceMilliseconds: Double
        public var panels: [Row]
    }

    public func run(_ context: BenchmarkContext) throws -> Result {
        let dashboards = try Dashboard.load(directory: dashboardsDirectory)
        let url = try context.freshDatabase("permaudit_bench_dashboards", sqlDirectory: sqlDirectory)
        defer { context.dropDatabase("permaudit_bench_dashboards") }
        let db = try Connection(url: url)
        context.log("loading \(events) events into the log")
        try SyntheticEvents.copy(events, into: db, seed: 11, recordedAsOccurred: true)
        // Intake anomalies as the write path records them: a duplicate for about one event in 1000.
        try db.query("""
            insert into audit.intake_anomalies (recorded_at, day, app, platform, duplicates)
            select recorded_at, (occurred_at at time zone 'UTC')::date, app, platform, 1
              from audit.events where position % 1000 = 0
            """)
        context.log("projector catch-up")
        try Projector(url: url).catchUp()
        try db.execute("vacuum analyze")

        let lastDay: Date = try db.query("select (max(day) + 1)::timestamp at time zone 'UTC' from analytics.events_daily").scalar()
        let from = lastDay.addingTimeInterval(-30 * 86400)
        let reference = try Self.median(runs: runs) { _ = try db.query("select count(*) from audit.events") }

        try db.execute("set role permaudit_analyst")
        context.log("panel queries as permaudit_analyst, \(runs) runs each")
        var panels: [Row] = []
        for query in try PanelQuery.all(dashboards, on: db, from: from, to: lastDay) {
            var count = 0
            let seconds = try Self.median(runs: runs) { count = try db.query(query.sql).count }
            panels.append(Row(dashboard: query.dashboard, panel: query.target.panelTitle, rows: count, milliseconds: seconds * 1000))
        }
        return Result(from: from, to: lastDay, referenceMilliseconds: reference * 1000, panels: panels)
    }

    /// The result as a Markdown table, slowest panel last line.
    public static func table(_ result: Result) -> String {
        var text = "| dashboard | panel | rows | ms (median) | vs reference |\n|---|---|---:|---:|---:|\n"
        text += String(format: "| (reference) | `SELECT count(*) FROM audit.events` | 1 | %.1f | 1.00x |\n", result.referenceMilliseconds)
        for row in result.panels {
            text += String(format: "| %@ | %@ | %d | %.1f | %.3fx |\n", row.dashboard, row.panel, row.rows, row.milliseconds,
                           row.milliseconds / max(result.referenceMilliseconds, 1e-9))
        }
        let slowest = result.panels.max { $0.milliseconds < $1.milliseconds }
        text += String(format: "\nslowest panel: %@ (%.1f ms)\n", slowest?.panel ?? "-", slowest?.milliseconds ?? 0)
        return text
    }

    static func median(runs: Int, _ body: () throws -> Void) throws -> Double {
        try ProjectionBenchmark.median(runs: runs, body)
    }
}
