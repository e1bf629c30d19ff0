import Analytics
import EventLog
import Foundation
import PermissionEvents
import Postgres
import Projections
import Reports
import Simulation

enum ReportCommand: Command {
    static let name = "report"
    static let abstract = "Write the batch report (Markdown, HTML, CSV, JSON) from the analytics views."
    static let usage = "permaudit report [--format md|html|csv|json|all] [--out <dir>] [--from <date>] [--to <date>] [--app <app>] [--platform ios|android] [--database-url <url>]"
    static let discussion = """
        Reads only the analytics views (run 'permaudit project --once' first) and writes to <dir>
        (default 'reports'): report.md, report.html (one self-contained file: inline SVG charts,
        no script, no network), report.json (format: docs/report-format.md) and csv/<table>.csv.
        Sections: summary and data quality; denial, limited and grant rates overall and by
        platform, OS major, app version, permission and flow with 95% Wilson intervals; weekly
        trend; pre-permission effect (primed vs unprimed, by platform, by app, each experiment);
        picker adoption, completion and full-access share; current permission states; compliance:
        over-permission findings (as 'permaudit audit permissions'). --from and --to bound the
        attempt day (YYYY-MM-DD, inclusive; --from after --to is an error).
        """
    static let options = [
        ("--format <format>", "md, html, csv, json or all (default all)."), ("--out <dir>", "Output directory (default reports)."),
        ("--from <date>", "First attempt day (YYYY-MM-DD)."), ("--to <date>", "Last attempt day (YYYY-MM-DD)."),
        ("--app <app>", "Only this app (1-255 characters [A-Za-z0-9._-])."), ("--platform <platform>", "Only ios or only android."),
        databaseOption,
    ]
    static let valueOptions: Set<String> = ["--format", "--out", "--from", "--to", "--app", "--platform", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        try arguments.noPositionals()
        let formats: [ReportWriter.Format]
        switch arguments.value("--format") ?? "all" {
        case "all": formats = ReportWriter.Format.allCases
        case let name:
            guard let format = ReportWriter.Format(rawValue: name) else {
                throw UsageError(message: "'--format' must be md, html, csv, json or all, got '\(name)'", usage: usage)
            }
            formats = [format]
        }
        let days = try arguments.dayRange()
        let filters = StatsQuery(app: try arguments.app(), platform: try arguments.platform(), from: days.from, to: days.to)
        let report = try Report.build(try openDatabase(arguments), filters: filters)
        let written = try ReportWriter(report).write(formats, to: URL(fileURLWithPath: arguments.value("--out") ?? "reports"))
        for note in report.notes { printError("note: " + ResultTable.visible(note)) }
        print(written.joined(separator: "\n"))
        return 0
    }
}

enum DemoCommand: Command {
    static let name = "demo"
    static let abstract = "The main job: simulate, ingest, project and report on the embedded database."
    static let usage = "permaudit demo [--fresh] [--subjects <n>] [--seed <n>] [--out <dir>]"
    static let discussion = """
        Starts the embedded PostgreSQL in $PERMAUDIT_HOME (default ./.permaudit), migrates it,
        simulates about 200,000 events over the last 28 days (26,000 installs), ingests them
        (broken events are rejected and counted), projects them, writes every report format to
        <dir> (default reports/demo) and prints the headline numbers with the true parameters the
        simulation used. Run again, it reuses the events already in the log and simulates nothing:
        --subjects and --seed are then not used, and a note on stderr says so; --fresh drops the
        embedded database and starts over with them.
        """
    static let options = [
        ("--fresh", "Drop the embedded database first and start over."),
        ("--subjects <n>", "Installs to simulate (default 26000, about 200,000 events)."),
        ("--seed <n>", "Simulation seed (default 1)."), ("--out <dir>", "Report directory (default reports/demo)."),
    ]
    static let valueOptions: Set<String> = ["--subjects", "--seed", "--out"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        try arguments.noPositionals()
        let subjects = try arguments.int("--subjects", default: 26_000, range: 1...10_000_000)
        let seed = UInt64(try arguments.int("--seed", default: 1, range: 0...Int.max))
        let out = URL(fileURLWithPath: arguments.value("--out") ?? "reports/demo")
        let started = Date()
        func step(_ text: String) { print(String(format: "[%5.1f s] ", Date().timeIntervalSince(started)) + text) }

        let cluster = EmbeddedCluster.fromEnvironment()
        step("embedded PostgreSQL in \(cluster.home.path)")
        if arguments.has("--fresh") {
            try cluster.start()
            try cluster.dropDatabase(EmbeddedCluster.databaseName)
            step("dropped the demo database (--fresh)")
        }
        let url = try cluster.start()
        let db = try Connection(url: url)
        let migrated = try Migrator(directory: try Migrator.locateDirectory()).migrate(db)
        step("migrated (\(migrated.applied.count) applied, \(migrated.alreadyApplied) already there)")

        let stored: Int = try db.query("select count(*)::bigint from audit.events").scalar()
        var truth: Truth?
        if stored == 0 {
            let days = 28
            let today = Int64(Date().timeIntervalSince1970 * 1000) / 86_400_000
            let run = Simulator(seed: seed, subjects: subjects, days: days, start: (today - Int64(days)) * 86_400_000).run()
            truth = run.truth
            step("simulated \(run.lines.count) lines: \(run.truth.events) events, \(run.truth.resentLines) re-sent, \(run.truth.malformedLines) broken")
            let path = NSTemporaryDirectory() + "permaudit-demo-\(getpid()).ndjson"
            defer { try? FileManager.default.removeItem(atPath: path) }
            try Data((run.lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: path))
            let ingestor = Ingestor(log: EventLog(connection: db))
            ingestor.mode = .storeValid
            let summary = try ingestor.ingest([path])
            step("ingested: appended \(summary.appended), duplicates \(summary.duplicates), rejected \(summary.rejected)")
        } else {
            step("the log already holds \(stored) events: reusing them (--fresh starts over)")
            let unused = ["--subjects", "--seed"].compactMap { name in arguments.value(name).map { "\(name) \($0)" } }
            if !unused.isEmpty {
                printError("note: \(unused.joined(separator: " and ")) \(unused.count == 1 ? "was" : "were") not used: nothing is simulated "
                           + "while the log holds events (--fresh drops them and simulates anew)")
            }
        }

        let projector = Projector(connection: db, secondConnectionURL: url)
        projector.log = { printError($0) }
        do { try projector.acquire(wait: false) } catch let error as ProjectorError { throw CommandFailure(message: error.description) }
        let progress = try projector.catchUp()
        try projector.release()
        step("projected \(progress.events) events in " + counted(progress.batches, "batch", "batches"))

        let report = try Report.build(db, filters: StatsQuery())
        let written = try ReportWriter(report).write(ReportWriter.Format.allCases, to: out)
        step("report written")
        print("")
        print(try headline(db))
        if let truth { print("\n" + truth.summary.joined(separator: "\n")) }
        print("\nReport: \(written.first { $0.hasSuffix(".html") } ?? out.path)")
        return 0
    }

    /// Headline rates and each experiment's lift with its interval.
    static func headline(_ db: Connection) throws -> String {
        let q = StatsQuery()
        let rates = try Stats.denial(db, q)
        var lines: [String] = ["Headline (95% intervals):"]
        func percent(_ value: Double?) -> String { value.map { String(format: "%.1f%%", 100 * $0) } ?? "n/a" }
        if !rates.rows.isEmpty {
            lines.append("  prompted attempts: \(rates.rows[0][rates.column("prompted")!].plain)")
            lines.append("  denial rate  \(percent(rates.number(0, "denial_rate"))) [\(percent(rates.number(0, "denial_low"))), \(percent(rates.number(0, "denial_high")))]")
            lines.append("  grant rate   \(percent(rates.number(0, "grant_rate"))) [\(percent(rates.number(0, "grant_low"))), \(percent(rates.number(0, "grant_high")))]")
            lines.append("  limited rate \(percent(rates.number(0, "limited_rate")))")
        }
        let picker = try Stats.picker(db, q)
        if !picker.rows.isEmpty { lines.append("  picker adoption \(percent(picker.number(0, "picker_adoption")))") }
        let priming = try Stats.priming(db, q.grouped(by: [.app]))
        for table in priming {
            let label = table.column("experiment") == nil ? "arm" : "variant"
            for row in table.rows.indices where table.number(row, "difference") != nil {
                let app = table.rows[row][table.column("app")!].plain
                let name = table.column("experiment").map { table.rows[row][$0].plain + " " } ?? ""
                lines.append("  \(app) \(name)\(table.rows[row][table.column(label)!].plain): access \(percent(table.number(row, "access_rate"))), "
                             + "difference \(String(format: "%+.1f", 100 * (table.number(row, "difference") ?? 0))) pp "
                             + "[\(String(format: "%+.1f", 100 * (table.number(row, "difference_low") ?? 0))), "
                             + "\(String(format: "%+.1f", 100 * (table.number(row, "difference_high") ?? 0)))], "
                             + "lift \(percent(table.number(row, "lift")))")
            }
        }
        return lines.map(ResultTable.visible).joined(separator: "\n")  // experiment and variant names are client text
    }
}
