import EventLog
import Foundation
import PermissionEvents
import Postgres

/// Opens the database for a command. The embedded cluster is ours, so it is migrated on the
/// way; an external database must have been migrated with `permaudit migrate`.
func openDatabase(_ arguments: ParsedArguments) throws -> Connection {
    try openDatabaseAndURL(arguments).connection
}

/// `openDatabase`, and the URL it connected to (for a command that opens more connections).
func openDatabaseAndURL(_ arguments: ParsedArguments) throws -> (connection: Connection, url: String) {
    let (connection, url, embedded) = try connectDatabase(arguments)
    let migrator = try Migrator(directory: try Migrator.locateDirectory())
    if embedded {
        try migrator.migrate(connection)
    } else {
        let pending: [String]
        do {
            pending = try migrator.pending(connection)
        } catch let error as PostgresError where error.code == .insufficientPrivilege {
            // The analyst reads nothing but the analytics views, not the migration record.
            return (connection, url)
        }
        if !pending.isEmpty {
            throw CommandFailure(message: "the database schema is not current (\(pending.count) migrations pending, first \(pending[0])); run 'permaudit migrate'")
        }
    }
    return (connection, url)
}

/// --database-url (refused when empty), else DATABASE_URL, else the embedded cluster's URL
/// (started on first use).
func resolveDatabaseURL(_ arguments: ParsedArguments) throws -> String {
    let explicit = arguments.value("--database-url")
    if explicit?.isEmpty == true { throw UsageError(message: "'--database-url' is empty", usage: arguments.usage) }
    return try Database.resolveURL(explicit)
}

/// Whether a database is named (--database-url, else a non-empty DATABASE_URL); else commands use
/// the embedded cluster.
func databaseIsNamed(_ arguments: ParsedArguments) -> Bool {
    arguments.value("--database-url") != nil || !(ProcessInfo.processInfo.environment["DATABASE_URL"] ?? "").isEmpty
}

/// Connects to `resolveDatabaseURL`, without looking at the schema. A URL that does not parse is
/// named by where it came from.
func connectDatabase(_ arguments: ParsedArguments) throws -> (connection: Connection, url: String, embedded: Bool) {
    let explicit = arguments.value("--database-url")
    let embedded = !databaseIsNamed(arguments)
    let url = try resolveDatabaseURL(arguments)
    do {
        return (try Connection(url: url), url, embedded)
    } catch let error as PostgresError where error.code == .invalidConnectionString {
        if explicit != nil { throw UsageError(message: "'--database-url': \(error.message)", usage: arguments.usage) }
        throw CommandFailure(message: "DATABASE_URL: \(error.message)")
    }
}

enum DbCommand: Command {
    static let name = "db"
    static let abstract = "Manage the embedded PostgreSQL cluster (start, stop, status, url)."
    static let usage = "permaudit db start|stop|status|url"
    static let discussion = """
        The embedded cluster lives in $PERMAUDIT_HOME (default ./.permaudit) and listens on a Unix
        socket only. Commands create and start it on first use when neither --database-url nor
        DATABASE_URL is given. As root, the server runs as the 'postgres' user.
        """
    static let options: [(String, String)] = []
    static let valueOptions: Set<String> = []

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        let action = try arguments.action(["start", "stop", "status", "url"])
        let cluster = EmbeddedCluster.fromEnvironment()
        try cluster.checkHome()
        switch action {
        case "start":
            let url = try cluster.start()
            print("running: \(url)")
        case "stop":
            if case .notCreated = try cluster.status() {
                print("not created (\(cluster.home.path))")
            } else {
                try cluster.stop()
                print("stopped")
            }
        case "status":
            switch try cluster.status() {
            case .notCreated: print("not created (\(cluster.home.path))")
            case .stopped: print("stopped (\(cluster.dataDirectory.path))")
            case let .running(pid): print("running (pid \(pid)): \(cluster.url)")
            }
        default:
            print(cluster.url)
        }
        return 0
    }
}

enum MigrateCommand: Command {
    static let name = "migrate"
    static let abstract = "Apply the numbered SQL migrations of sql/ that are not applied yet."
    static let usage = "permaudit migrate [--database-url <url>]"
    static let discussion = """
        Each file is applied once, in order, in its own transaction, and recorded with its SHA-256
        checksum in permaudit.schema_migrations. Editing an applied file is an error.
        The directory is $PERMAUDIT_SQL_DIR, else the nearest sql/ above the working directory.
        It runs as a superuser, or as a login that owns the database, may create roles and is a
        member of permaudit_owner (docs/deployment.md); the migrations' notices go to stderr.
        Then it checks what a restore can leave wrong (docs/deployment.md): guard triggers of
        schema audit that no longer fire ALWAYS are set back (a warning says so), and a
        transaction counter behind the log (appends fail with PA004) is a warning.
        """
    static let options = [databaseOption]
    static let valueOptions: Set<String> = ["--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        try arguments.noPositionals()
        let connection = try connectDatabase(arguments).connection
        let outcome: Migrator.Outcome
        do {
            outcome = try Migrator(directory: try Migrator.locateDirectory()).migrate(connection)
        } catch let error as MigrationError {
            throw CommandFailure(message: error.description)
        }
        for name in outcome.applied { print("applied \(name)") }
        print("schema is current: \(outcome.applied.count) applied now, \(outcome.alreadyApplied) before")
        for notice in outcome.notices { printError(notice) }
        for note in outcome.restoreNotes { printError("warning: \(note)") }
        return 0
    }
}

enum AppendCommand: Command {
    static let name = "append"
    static let abstract = "Append one event (a wire-format JSON object) to the log."
    static let usage = "permaudit append [<json>] [--database-url <url>]"
    static let discussion = "The event is the argument, or standard input when there is none or it is '-'; a UTF-8 byte order mark before it is skipped."
    static let options = [databaseOption]
    static let valueOptions: Set<String> = ["--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        guard arguments.positionals.count <= 1 else { throw UsageError(message: "expected at most one JSON event", usage: usage) }
        let argument = arguments.positionals.first.flatMap { $0 == "-" ? nil : $0 }
        var bytes = argument.map(rawArgument) ?? Array(FileHandle.standardInput.readDataToEndOfFile())
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }  // as ingest skips one
        let db = try openDatabase(arguments)
        // Checked here to name the rule; the 24 h rule against the server's clock.
        let validator = EventValidator(now: Date().addingTimeInterval(try db.clockOffset()))
        if case let .failure(problem) = validator.validate(bytes: bytes) {
            throw CommandFailure(message: problem.description)
        }
        let line = String(decoding: bytes, as: UTF8.self)
        let log = EventLog(connection: db)
        let results: [EventLog.AppendResult]
        do {
            results = try log.append([line])
        } catch let error as AppendError {
            throw CommandFailure(message: error.reason)  // the one event: no batch index
        }
        for result in results {
            switch result.status {
            case .appended: print("appended \(result.eventId.uuidString.lowercased()) at position \(result.position ?? 0)")
            case .duplicate: print("duplicate \(result.eventId.uuidString.lowercased()) (already stored)")
            }
        }
        return 0
    }
}

enum IngestCommand: Command {
    static let name = "ingest"
    static let abstract = "Append the events of NDJSON files (or standard input)."
    static let usage = "permaudit ingest [<file> ...] [--rejects <file>] [--batch-size <n>] [--database-url <url>]"
    static let discussion = """
        Reads each file ('-' or none: standard input) line by line in bounded memory and prints
        'appended N, duplicates D, rejected R'. By default all-or-nothing: if any line is invalid,
        nothing from the input is stored, the first 100 errors are printed as 'LINE: field: rule'
        and the exit status is 1 (once every line is valid, the lines the database refuses, an
        event id stored before with other content, are all named too, up to 100 errors). With
        --rejects FILE the valid lines are stored, each invalid line is written to FILE as
        {"input", "line", "reason", "raw"} (and "rawBase64", the exact bytes, for a line that is
        not UTF-8), and the exit status is 3 when any line was rejected (FILE must not be one of
        the inputs; a regular file gets mode 0600). Lines may end in LF or CRLF; a UTF-8 byte
        order mark before the first line is skipped. SIGINT or SIGTERM stops it at the next batch
        and says what was stored (exit 130 or 143; all or nothing: nothing); a second one quits at
        once.
        """
    static let options = [
        ("--rejects <file>", "Store the valid lines; write invalid ones to <file> (NDJSON)."),
        ("--batch-size <n>", "Events per write-path call, 1-10000 (default 1000)."),
        databaseOption,
    ]
    static let valueOptions: Set<String> = ["--rejects", "--batch-size", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        let inputs = arguments.positionals.isEmpty ? ["-"] : arguments.positionals
        let batchSize = try arguments.int("--batch-size", default: 1000, range: 1...10_000)
        if arguments.value("--rejects") == "-" {
            throw UsageError(message: "'--rejects' needs a file: standard output carries the summary", usage: usage)
        }
        for input in inputs where input != "-" {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: input, isDirectory: &isDirectory) else { throw CommandFailure(message: "\(input): no such file") }
            guard !isDirectory.boolValue else { throw CommandFailure(message: "\(input): is a directory") }
            guard FileManager.default.isReadableFile(atPath: input) else { throw CommandFailure(message: "\(input): not readable") }
        }
        if let path = arguments.value("--rejects"), let input = inputs.first(where: { sameFile($0, path) }) {
            throw UsageError(message: "'--rejects' names an input (\(input == "-" ? "standard input" : input)): the file would be emptied before it is read", usage: usage)
        }
        let ingestor = Ingestor(log: EventLog(connection: try openDatabase(arguments)))
        ingestor.batchSize = batchSize
        let prefixInput = inputs.count > 1
        var printed = 0
        let rejectsFile = try arguments.value("--rejects").map(RejectsFile.init(path:))
        if rejectsFile != nil { ingestor.mode = .storeValid }
        ingestor.onReject = { rejection in
            if let rejectsFile {
                try rejectsFile.write(rejection)
            } else if printed < 100 {
                printed += 1
                printError((prefixInput ? "\(rejection.input):" : "") + "\(rejection.line): \(rejection.reason)")
            }
        }
        if isatty(2) == 1 {
            ingestor.onProgress = { summary in
                writeToStandardError("\r\(summary.lines) lines: appended \(summary.appended), duplicates \(summary.duplicates), rejected \(summary.rejected)")
            }
        }
        let stop = StopSignal(announce: "stopping at the next batch (interrupt again to quit at once)")
        ingestor.shouldStop = stop.requested
        /// With --rejects, what an ingest that ended early had done.
        func stored(in rejectsFile: RejectsFile) -> String {
            let done = ingestor.summary
            return "appended \(done.appended), duplicates \(done.duplicates) (stored); rejected \(done.rejected) (written to \(rejectsFile.path))"
        }
        let summary: Ingestor.Summary
        do {
            summary = try ingestor.ingest(inputs)
        } catch is IngestInterrupted {
            if isatty(2) == 1 { writeToStandardError("\r\u{1B}[K") }
            printError(rejectsFile.map { "interrupted: \(stored(in: $0)); the same command again stores the rest" }
                       ?? "interrupted: nothing from the input was stored (all or nothing)")
            return stop.exitStatus
        } catch {
            if let rejectsFile {
                printError("before the error: " + stored(in: rejectsFile))
            } else {
                printError("all or nothing: nothing from the input was stored (the same command again stores it; "
                           + "had the connection been lost as the input committed, what it stored counts as duplicates)")
            }
            throw error
        }
        if isatty(2) == 1 { writeToStandardError("\r\u{1B}[K") }
        if rejectsFile == nil && summary.rejected > printed {
            printError("... and \(summary.rejected - printed) more")
        }
        if ingestor.stoppedLookingForRefusals {
            printError("(the search for lines the database refuses stopped at \(summary.rejected) errors: there may be more)")
        }
        print("appended \(summary.appended), duplicates \(summary.duplicates), rejected \(summary.rejected)")
        if summary.rejected > 0 {
            if rejectsFile == nil { printError("nothing was stored: fix the lines above, or use --rejects FILE to store the valid lines") }
            return rejectsFile == nil ? 1 : 3
        }
        return 0
    }
}

/// Whether `input` (a path, or `-`: standard input) and `path` are one file.
private func sameFile(_ input: String, _ path: String) -> Bool {
    var a = stat(), b = stat()
    guard (input == "-" ? fstat(0, &a) : stat(input, &a)) == 0, stat(path, &b) == 0 else { return false }
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

enum EventsCommand: Command {
    static let name = "events"
    static let abstract = "Print stored events in committed order as NDJSON, with positions."
    static let usage = "permaudit events [--limit <n>] [--database-url <url>]"
    static let discussion = """
        Each line is {"position", "transactionId", "stream", "streamVersion", "recordedAt", "event"},
        where event is the stored wire-format event (without subject, which the log never holds).
        """
    static let options = [("--limit <n>", "Print at most n events (default: all)."), databaseOption]
    static let valueOptions: Set<String> = ["--limit", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        try arguments.noPositionals()
        var remaining = try arguments.int("--limit", default: Int.max, range: 0...Int.max)
        let log = EventLog(connection: try openDatabase(arguments))
        let out = OutputBuffer()
        var checkpoint = EventLog.Checkpoint.start
        while remaining > 0 {
            let page = try log.read(after: checkpoint, limit: min(remaining, 1000))
            if page.isEmpty { break }
            for event in page {
                out.write("{\"position\":\(event.position),\"transactionId\":\"\(event.transactionId)\",\"stream\":\(event.streamKey),\"streamVersion\":\(event.streamVersion),\"recordedAt\":\"\(PostgresTimestamp.format(event.recordedAt))\",\"event\":\(event.payload)}\n")
            }
            remaining -= page.count
            checkpoint = page[page.count - 1].checkpoint
        }
        out.flush()
        return 0
    }
}
