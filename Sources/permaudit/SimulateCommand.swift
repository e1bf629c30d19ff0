import EventLog
import Foundation
import PermissionEvents
import Simulation

enum SimulateCommand: Command {
    static let name = "simulate"
    static let abstract = "Generate realistic permission traffic (wire format v1), deterministic by seed."
    static let usage = """
        permaudit simulate [--seed <n>] [--subjects <n>] [--days <n>] [--start <date>] [--out <file>] [--database-url <url>]
               permaudit simulate --live [--rate <n>] [--duration <s>] [--subjects <n>] [--seed <n>] [--database-url <url>]
        """
    static let discussion = """
        Installs of three apps on iOS and Android (realistic OS version mixes) use the flows
        avatar, chatAttachment, backup, gallery and editorSave over --days days from --start:
        pre-permission screens (a 'priming-2026' experiment with a true effect, and an app that
        always primes), iOS limited and Android 14+ partial grants, restricted iOS devices, iOS
        denials after which no dialog shows, Android "don't ask again" after two denials, settings
        visits and grants there, status reads that reveal them, and the system picker, used more
        in each newer app version. Delivery is realistic too: sessions sent hours or days late,
        sessions in reverse order, re-sent events (duplicates) and a few broken events.

        With --out the NDJSON lines go to <file> in delivery order; without it they are ingested
        into the database (valid events stored, broken ones counted as rejected). The true
        parameters and what was generated are printed, so a report can be checked against them.

        --live appends sessions happening now, at about --rate events per second (default 20),
        for --duration seconds or until SIGINT/SIGTERM: traffic for live dashboards.
        """
    static let options = [
        ("--seed <n>", "Random seed (default 1): the same seed and options give the same events (--live mixes in the start time)."),
        ("--subjects <n>", "Installs (default 10000; --live: the pool of installs, default 1000)."),
        ("--days <n>", "Length of the period in days (default 28)."),
        ("--start <date>", "First day, YYYY-MM-DD (default: --days days before today, UTC)."),
        ("--out <file>", "Write NDJSON to <file> instead of ingesting."),
        ("--live", "Append sessions as they happen (occurredAt now) until stopped."),
        ("--rate <n>", "Live: events per second (default 20)."),
        ("--duration <s>", "Live: stop after this many seconds (default: run until stopped)."),
        databaseOption,
    ]
    static let valueOptions: Set<String> = ["--seed", "--subjects", "--days", "--start", "--out", "--rate", "--duration", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        try arguments.noPositionals()
        let seed = UInt64(try arguments.int("--seed", default: 1, range: 0...Int.max))
        if arguments.has("--live") {
            try arguments.refuse(allBut: ["--live", "--rate", "--duration", "--subjects", "--seed", "--database-url"], for: "--live")
            return try live(arguments, seed: seed)
        }
        try arguments.refuse(allBut: ["--seed", "--subjects", "--days", "--start", "--out", "--database-url"], for: "a simulated period (without --live)")
        let simulator = Simulator(seed: seed, subjects: try arguments.int("--subjects", default: 10_000, range: 1...10_000_000),
                                  days: try arguments.int("--days", default: 28, range: 1...3650),
                                  start: try startDay(arguments))
        let outcome = try generate(simulator, out: arguments.value("--out"), database: arguments)
        print(outcome)
        return 0
    }

    /// The --start day in milliseconds, default --days days before today (UTC).
    static func startDay(_ arguments: ParsedArguments) throws -> Int64 {
        let days = Int64(try arguments.int("--days", default: 28, range: 1...3650))
        guard let text = try arguments.day("--start") else {
            let today = Int64(Date().timeIntervalSince1970 * 1000) / 86_400_000
            return (today - days) * 86_400_000
        }
        let start = Int64(RFC3339.parse(text + "T00:00:00Z")!.timeIntervalSince1970 * 1000)
        let endOfToday = (Int64(Date().timeIntervalSince1970 * 1000) / 86_400_000 + 1) * 86_400_000
        guard start + days * 86_400_000 <= endOfToday else {
            throw UsageError(message: "'--start' \(text) with --days \(days) ends after today (UTC): the write path refuses events more than 24 h ahead of the server's clock",
                             usage: usage)
        }
        return start
    }

    /// Runs the simulation; writes it to `out` or ingests it. Returns the text to print.
    static func generate(_ simulator: Simulator, out: String?, database arguments: ParsedArguments) throws -> String {
        let run = simulator.run()
        let path = out ?? NSTemporaryDirectory() + "permaudit-simulate-\(getpid()).ndjson"
        guard FileManager.default.createFile(atPath: path, contents: nil), let file = FileHandle(forWritingAtPath: path) else {
            throw CommandFailure(message: "\(path): cannot create the output file")
        }
        var chunk = ""
        for line in run.lines {
            chunk += line
            chunk += "\n"
            if chunk.utf8.count > 1 << 20 { file.write(Data(chunk.utf8)); chunk = "" }
        }
        file.write(Data(chunk.utf8))
        try file.close()
        var text = "simulated \(run.lines.count) lines (seed \(simulator.seed), \(simulator.subjects) installs, "
            + "\(simulator.days) days from \(simulator.startDate))\n"
            + run.truth.summary.joined(separator: "\n")
        if out != nil {
            text += "\nwritten to \(path)"
        } else {
            defer { try? FileManager.default.removeItem(atPath: path) }
            let ingestor = Ingestor(log: EventLog(connection: try openDatabase(arguments)))
            ingestor.mode = .storeValid
            let summary = try ingestor.ingest([path])
            text += "\ningested: appended \(summary.appended), duplicates \(summary.duplicates), rejected \(summary.rejected)"
        }
        return text
    }

    static func live(_ arguments: ParsedArguments, seed: UInt64) throws -> Int32 {
        let rate = Double(try arguments.int("--rate", default: 20, range: 1...100_000))
        let duration = arguments.value("--duration") == nil ? nil : Double(try arguments.int("--duration", default: 0, range: 1...Int.max))
        var model = Model()
        model.malformed = 0  // live traffic goes straight to the write path
        // Event ids come from the seed: mixed with the start time, so that a second run (its
        // events happen at other times) never sends an id the first one stored.
        let runSeed = seed ^ UInt64(Date().timeIntervalSince1970 * 1_000_000)
        let simulator = Simulator(model: model, seed: runSeed, subjects: try arguments.int("--subjects", default: 1000, range: 1...10_000_000),
                                  days: 1, start: 0)
        let log = EventLog(connection: try openDatabase(arguments))
        let stop = StopSignal()
        let started = Date()
        var sent = 0
        printError("simulating live traffic at about \(Int(rate)) events/s (SIGINT or SIGTERM to stop)")
        try simulator.live(now: { Int64(Date().timeIntervalSince1970 * 1000) }) { events in
            _ = try log.append(events)
            sent += events.count
            let elapsed = Date().timeIntervalSince(started)
            let ahead = Double(sent) / rate - elapsed
            if ahead > 0 { Thread.sleep(forTimeInterval: ahead) }
            return !stop.requested() && (duration.map { Date().timeIntervalSince(started) < $0 } ?? true)
        }
        print("appended \(sent) events in \(Int(Date().timeIntervalSince(started))) s")
        return 0
    }
}
