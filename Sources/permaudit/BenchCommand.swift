import Benchmarks
import Dashboards
import EventLog
import Foundation
import Postgres
import Projections

enum BenchCommand: Command {
    static let name = "bench"
    static let abstract = "Measure PermissionAudit against the physical reference (raw COPY, plain INSERT, plain SELECT)."
    static let usage = "permaudit bench ingest|append|project|report|dashboards|audit|serve [--events <n>] [--batch-size <n>] [--database-url <url>]"
    static let discussion = """
        Each benchmark runs its reference and PermissionAudit side by side, in one run on one
        server, in scratch databases it creates and drops, and prints a Markdown table with the
        ratio to the reference (for BENCHMARKS.md). Build with 'swift build -c release' first.
          ingest   NDJSON ingest of --events generated events (default 1000000) vs raw COPY of
                   the same rows into a plain table with the same indexes; also the floor of
                   any write path over JSON arrays (one unchecked INSERT per 1000 events)
          append   single-event appends through audit.append_events with 1 and 8 connections vs
                   a plain one-row INSERT per transaction, both prepared statements (--events
                   per connection, default 2000); also a plain INSERT of the log's row and the
                   floor of a write path over a JSON array (one unchecked INSERT per call)
          project  the projector over --events events (default 1000000) from an empty
                   projection, in one pass on two connections (as 'project' runs it) and on one,
                   and in batches, vs a plain COPY of the same rows out of the log; projector
                   memory; the three headline questions from the views vs ad-hoc SQL over the
                   raw log
          report   'permaudit report' in every format over --events projected events (default
                   1000000) vs a plain SELECT of every row of the views it reads; client memory
          dashboards
                   every Grafana panel query of dashboards/dashboards as permaudit_analyst, expanded
                   for the last 30 days of --events synthetic events (default 5000000), projected,
                   with every variable at All (median of 5 runs) vs SELECT count(*) of the log
          audit    audit seal and audit verify over --events events (default 1000000) vs a plain
                   sha256() of the same canonical rows in SQL
          serve    batches of 50 events posted to the HTTP collector (in this process, loopback,
                   keep-alive) with 8 and 64 connections vs the same batches through
                   EventLog.append on as many database connections; events/s, p50 and p99
                   (--events per row, default 100000)
        """
    static let options = [("--events <n>", "Number of events (see above)."),
                          ("--batch-size <n>", "Events per projector batch, for 'project' (default \(Projector.defaultBatchSize))."), databaseOption]
    static let valueOptions: Set<String> = ["--events", "--batch-size", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        guard arguments.positionals.count == 1, let which = arguments.positionals.first else {
            throw UsageError(message: "expected one benchmark: ingest, append, project, report, dashboards, audit or serve", usage: usage)
        }
        if which != "project", arguments.value("--batch-size") != nil {
            throw UsageError(message: "--batch-size applies only to 'bench project'", usage: usage)
        }
        let url = try resolveDatabaseURL(arguments)
        let context = BenchmarkContext(adminURL: url, log: { printError("bench: \($0)") })
        let sql = try Migrator.locateDirectory()
        let rows: [BenchmarkRow]
        let reference: String
        switch which {
        case "ingest":
            let events = try arguments.int("--events", default: 1_000_000)
            rows = try IngestBenchmark(events: events, sqlDirectory: sql, workDirectory: URL(fileURLWithPath: NSTemporaryDirectory())).run(context)
            reference = rows[0].name
        case "append":
            let events = try arguments.int("--events", default: 2000)
            let tables = try AppendBenchmark(eventsPerConnection: events, sqlDirectory: sql).run(context)
            print("permaudit bench append, \(ISO8601DateFormatter().string(from: Date())), \(BenchmarkReport.machine)\n")
            for table in tables { print(BenchmarkReport.table(table, reference: table[0].name)) }
            return 0
        case "project":
            let events = try arguments.int("--events", default: 1_000_000)
            let batchSize = try arguments.int("--batch-size", default: Projector.defaultBatchSize, range: 1...1_000_000)
            let result = try ProjectionBenchmark(events: events, sqlDirectory: sql, batchSize: batchSize).run(context)
            rows = result.rows
            reference = rows[0].name
            print("permaudit bench project, \(ISO8601DateFormatter().string(from: Date())), \(BenchmarkReport.machine)\n")
            print(BenchmarkReport.table(rows, reference: reference))
            print(String(format: "projector peak memory: client %.0f MiB (%.0f MiB before the catch-up), server backends %@\n",
                         result.clientPeakMiB, result.clientBeforeMiB,
                         result.serverPeakMiB.map { String(format: "%.0f MiB private (RssAnon, summed)", $0) } ?? "not readable"))
            print("| headline question | from the views (ms) | ad-hoc over the log (ms) | speed-up |\n|---|---:|---:|---:|")
            for item in result.headline {
                print(String(format: "| %@ | %.1f | %.1f | %.0fx |", item.question, item.views * 1000, item.log * 1000, item.log / max(item.views, 1e-9)))
            }
            return 0
        case "audit":
            let events = try arguments.int("--events", default: 1_000_000)
            rows = try AuditBenchmark(events: events, sqlDirectory: sql).run(context)
            reference = rows[0].name
        case "report":
            let events = try arguments.int("--events", default: 1_000_000)
            let result = try ReportBenchmark(events: events, sqlDirectory: sql).run(context)
            print("permaudit bench report, \(events) events, \(ISO8601DateFormatter().string(from: Date())), \(BenchmarkReport.machine)\n")
            print("| measurement | rows | ms (median of 3) | vs reference | note |\n|---|---:|---:|---:|---|")
            for row in result.rows {
                print(String(format: "| %@ | %d | %.1f | %.2fx | %@ |", row.name, row.count, row.seconds * 1000,
                             row.seconds / max(result.rows[0].seconds, 1e-9), row.note))
            }
            print(String(format: "\nreport client peak memory: %.0f MiB", result.clientPeakMiB))
            return 0
        case "dashboards":
            let events = try arguments.int("--events", default: 5_000_000)
            let result = try DashboardBenchmark(events: events, sqlDirectory: sql, dashboardsDirectory: try Dashboard.locateDirectory()).run(context)
            print("permaudit bench dashboards, \(events) events, \(ISO8601DateFormatter().string(from: Date())), \(BenchmarkReport.machine)")
            print("range \(ISO8601DateFormatter().string(from: result.from)) to \(ISO8601DateFormatter().string(from: result.to)), all variables at All\n")
            print(DashboardBenchmark.table(result))
            return 0
        case "serve":
            let events = try arguments.int("--events", default: 100_000)
            let result = try ServeBenchmark(eventsPerRow: events, sqlDirectory: sql).run(context)
            print("permaudit bench serve, \(ISO8601DateFormatter().string(from: Date())), \(BenchmarkReport.machine)\n")
            print(ServeBenchmark.table(result))
            return 0
        default:
            throw UsageError(message: "unknown benchmark '\(which)'; expected ingest, append, project, report, dashboards, audit or serve", usage: usage)
        }
        print("permaudit bench \(which), \(ISO8601DateFormatter().string(from: Date())), \(BenchmarkReport.machine)\n")
        print(BenchmarkReport.table(rows, reference: reference))
        return 0
    }
}
