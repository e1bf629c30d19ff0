import Analytics
import Compliance
import Crypto
import EventLog
import Foundation
import PermissionEvents
import Postgres
import Projections

enum ProjectCommand: Command {
    static let name = "project"
    static let abstract = "Turn the log into the analytics projections (once, follow, rebuild, status)."
    static let usage = "permaudit project --once|--follow|--rebuild|--status [--batch-size <n>] [--poll <seconds>] [--seal-every <seconds>] [--key <file>] [--wait] [--database-url <url>]"
    static let discussion = """
        Reads the log in committed order, in batches; each batch's projection writes and its
        checkpoint commit in one transaction. An empty projection (the first run, a rebuild, a
        migration that reset it) is first built in one pass over the log, one transaction (a
        second connection computes the install tables meanwhile, into staging tables that the
        transaction copies), unless --batch-size is given. Only one projector catches up at a
        time: a second --once or --follow exits with a message naming the first, or queues
        behind it with --wait. --rebuild may run beside them: it waits for their batch in
        flight, and their next batch waits for it and continues from the rebuilt checkpoint.
          --once     catch up to the current end, print what was done, exit
          --follow   keep up, woken by NOTIFY permaudit_events with a polling fallback;
                     SIGINT/SIGTERM finish the current batch and exit 0; a lost connection
                     (database restart) is retried every 1-30 s, then it takes the lock again
                     and goes on from the checkpoint; a batch rolled back for a passing
                     reason (deadlock, lock or statement time-out, server out of resources)
                     is retried after the poll interval; other errors end it (exit 1); with
                     --seal-every N it also seals the committed log every N seconds
                     (permaudit audit seal)
          --rebuild  recompute everything from the start in one transaction: readers see the
                     previous numbers until it commits, then the new ones at once; with
                     --batch-size, in at most 500 batches (larger ones where needed)
          --status   checkpoint, events behind (and how many wait for an older transaction still
                     open), age of the oldest unprojected event
        An option that does not apply to the chosen mode is a usage error.
        """
    static let options = [
        ("--once", "Catch up and exit."), ("--follow", "Keep up continuously."),
        ("--rebuild", "Recompute from the start and switch atomically."), ("--status", "Show the checkpoint and the lag."),
        ("--batch-size <n>", "Events per batch (default \(Projector.defaultBatchSize)); also for an empty projection."), ("--poll <seconds>", "Polling fallback for --follow (default 5)."),
        ("--seal-every <seconds>", "With --follow: seal every so many seconds."),
        ("--key <file>", "Seal private key (default $PERMAUDIT_HOME/keys/seal-ed25519.pem)."),
        ("--wait", "Wait for a running projector instead of exiting."), databaseOption,
    ]
    static let valueOptions: Set<String> = ["--batch-size", "--poll", "--seal-every", "--key", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        try arguments.noPositionals()
        let modes = ["--once", "--follow", "--rebuild", "--status"].filter(arguments.has)
        guard modes.count == 1 else { throw UsageError(message: "choose exactly one of --once, --follow, --rebuild, --status", usage: usage) }
        let applies: [String: Set<String>] = [
            "--once": ["--batch-size", "--wait"], "--follow": ["--batch-size", "--poll", "--seal-every", "--key", "--wait"],
            "--rebuild": ["--batch-size"], "--status": [],
        ]
        try arguments.refuse(allBut: applies[modes[0], default: []].union([modes[0], "--database-url"]), for: modes[0])
        if arguments.value("--key") != nil && arguments.value("--seal-every") == nil {
            throw UsageError(message: "'--key' is the seal key: it needs --seal-every", usage: usage)
        }
        let batchSize = try arguments.int("--batch-size", default: Projector.defaultBatchSize, range: 1...1_000_000)
        // Reconnections and the one-pass build's second connection go to the URL found now: a
        // stopped embedded cluster is waited for, not started.
        let (connection, databaseURL) = try openDatabaseAndURL(arguments)
        func makeProjector(_ connection: Connection) -> Projector {
            let projector = Projector(connection: connection, secondConnectionURL: databaseURL)
            projector.batchSize = batchSize
            projector.buildsEmptyProjectionInOnePass = arguments.value("--batch-size") == nil
            projector.log = { printError($0) }
            return projector
        }
        var projector = makeProjector(connection)
        let poll = Double(try arguments.int("--poll", default: 5, range: 1...3600))
        let started = Date()
        // The time the command has run: for --once and --rebuild, how long the work took; a
        // follower's lines leave it out (it would count the idle time between catch-ups).
        func report(_ progress: Projector.Progress, timed: Bool = true) -> String {
            let seconds = timed ? String(format: ", %.1f s", Date().timeIntervalSince(started)) : ""
            return "projected " + counted(progress.events, "event", "events") + " (" + counted(progress.attempts, "attempt update", "attempt updates") + ") in "
                + counted(progress.batches, "batch", "batches") + seconds + ", checkpoint \(progress.checkpoint)"
        }
        let interactive = isatty(2) == 1
        let progressLine: (Projector.Progress) -> Void = { progress in
            if interactive { writeToStandardError("\r\(report(progress))") }
        }
        func acquire(_ projector: Projector) throws {
            do {
                try projector.acquire(wait: arguments.has("--wait"))
            } catch let error as ProjectorError {
                guard case .busy = error else { throw CommandFailure(message: error.description) }
                throw CommandFailure(message: error.description + " (use --wait to queue behind it; one just stopped or killed lets go once the server has ended its statement)")
            }
        }
        if modes[0] == "--once" || modes[0] == "--follow" { try acquire(projector) }
        switch modes[0] {
        case "--status":
            let status = try projector.status()
            print("checkpoint: \(status.checkpoint) (transaction id, position)")
            print("events projected: \(status.eventsProjected)"
                  + (status.eventsProjected == 0 ? "" : ", last batch at \(ISO8601DateFormatter().string(from: status.updatedAt))"))
            print("events behind: \(status.eventsBehind)" + (status.eventsWaiting == 0 ? ""
                  : " (\(status.eventsWaiting) wait for an older transaction still open: projected once it ends)"))
            print("oldest unprojected event: " + (status.oldestUnprojectedAge.map { String(format: "%.0f s old", $0) } ?? "none (caught up)"))
        case "--rebuild":
            let done = try projector.rebuild(onBatch: progressLine)
            if interactive { writeToStandardError("\r\u{1B}[K") }
            print("rebuilt: " + report(done))
        case "--once":
            let done = try projector.catchUp(onBatch: progressLine)
            if interactive { writeToStandardError("\r\u{1B}[K") }
            print(report(done))
        default:
            let stop = StopSignal()
            printError("following the log (SIGINT or SIGTERM to stop)")
            // Periodic sealing, on the projector's own connection between batches.
            var sealer: Sealer?
            var lastSeal = Date.distantPast
            if arguments.value("--seal-every") != nil {
                let url = arguments.value("--key").map { URL(fileURLWithPath: $0) } ?? AuditCommand.keyDirectory.appendingPathComponent("seal-ed25519.pem")
                do { sealer = Sealer(key: try KeyStore.signingKey(at: url)) } catch { throw CommandFailure(message: "\(error)") }
            }
            let sealEvery = Double(try arguments.int("--seal-every", default: 60, range: 1...86_400))
            while !stop.requested() {
                do {
                    try projector.follow(pollInterval: poll, shouldStop: stop.requested, onBatch: { progress in
                        printError(report(progress, timed: false))
                    }, afterCatchUp: {
                        guard let current = sealer, Date().timeIntervalSince(lastSeal) >= sealEvery else { return }
                        lastSeal = Date()
                        do {
                            for seal in try current.seal(projector.connection) {
                                printError("sealed \(seal.eventCount) events as seal \(seal.id), seal hash \(Hex.encode(seal.sealHash))")
                            }
                        } catch let error as ComplianceError {
                            // Not this key's chain: projecting goes on, sealing stops until restarted.
                            printError("not sealing any more: \(error)")
                            sealer = nil
                        }
                    })
                } catch let error as PostgresError where !projector.connection.isOpen {
                    // The connection is gone (a database restart, a terminated backend): the batch in
                    // flight rolled back with it. Connect again, take the lock again, go on from the
                    // checkpoint.
                    printError("lost the database connection (\(error)); reconnecting")
                    guard let next = try reconnect({ makeProjector(try Connection(url: databaseURL)) }, stop: stop) else { break }
                    try acquire(next)
                    projector = next
                    printError("reconnected; following the log again")
                } catch let error as PostgresError where error.isTransient {
                    // The batch in flight rolled back (a deadlock, a lock or statement time-out,
                    // the server short of space): the checkpoint did not move; try again.
                    let hint = error.code == .queryCanceled
                        ? " (if a statement time-out repeats, a batch takes longer than statement_timeout allows: lower --batch-size, which also builds an empty projection in batches, or raise statement_timeout for this role)"
                        : ""
                    printError("the batch failed and was rolled back (\(error)); retrying in \(Int(poll)) s" + hint)
                    let resume = Date().addingTimeInterval(poll)
                    while !stop.requested() && Date() < resume { Thread.sleep(forTimeInterval: 0.1) }
                }
            }
            printError("stopped")
        }
        return 0
    }
}

enum StatsCommand: Command {
    static let name = "stats"
    static let abstract = "Quick product analytics in the terminal: denial, priming, picker."
    static let usage = "permaudit stats denial|priming|picker [--by <dims>] [--app <app>] [--platform ios|android] [--from <date>] [--to <date>] [--format table|csv|json] [--database-url <url>]"
    static let discussion = """
        Reads the analytics views (run 'permaudit project --once' first; a note on stderr says
        how many stored events are not projected yet). --by takes a comma-separated
        list of day, week, app, platform, osMajor, appVersion, permission, flow, for every statistic
        (a picker attempt involves no permission: with --by permission it falls in the group
        without one, unless another event of the attempt names one). week is the ISO week,
        shown as its Monday. osMajor always comes with platform (iOS and Android version
        numbers overlap): --by osMajor groups by platform, osMajor. --from and --to bound the
        attempt day (YYYY-MM-DD, inclusive; --from after --to is an error). Intervals are 95%
        Wilson intervals; priming shows each arm against its baseline (unprimed, or the control
        variant) with relative lift, the unpooled difference interval, and the pooled z statistic
        with its two-sided p-value; an experiment run in several apps is pooled across them
        unless grouped or filtered by app (a note on stderr names it), and an experiment without
        a variant named control has no baseline (a note on stderr names it too). Text from
        clients (app versions, variants) is printed as it is stored, but in the table format
        control characters show as \\u{1B}. Numbers other than zero under 0.00005 (in size) in
        the table format are shown in scientific notation (1.9e-06); csv and json keep every digit.
        """
    static let options = [
        ("--by <dims>", "Group by these dimensions (comma-separated)."), ("--app <app>", "Only this app (1-255 characters [A-Za-z0-9._-])."),
        ("--platform <platform>", "Only ios or only android."),
        ("--from <date>", "First attempt day (YYYY-MM-DD)."), ("--to <date>", "Last attempt day (YYYY-MM-DD)."),
        ("--format <format>", "table (default), csv or json. priming has two tables (arms, experiments): csv prints them as two blocks separated by an empty line, json as one array of {title, rows}."), databaseOption,
    ]
    static let valueOptions: Set<String> = ["--by", "--app", "--platform", "--from", "--to", "--format", "--database-url"]

    static func run(_ arguments: ParsedArguments) throws -> Int32 {
        let which = try arguments.action(["denial", "priming", "picker"])
        var query = StatsQuery(app: try arguments.app(), platform: try arguments.platform())
        (query.from, query.to) = try arguments.dayRange()
        if let by = arguments.value("--by") {
            query.by = try by.split(separator: ",", omittingEmptySubsequences: false).map { name in
                guard let dimension = StatsQuery.Dimension(rawValue: name.trimmingCharacters(in: .whitespaces)) else {
                    throw UsageError(message: "unknown dimension '\(name)' in --by; use \(StatsQuery.Dimension.allCases.map(\.rawValue).joined(separator: ", "))", usage: usage)
                }
                return dimension
            }
            if let repeated = query.by.first(where: { d in query.by.filter { $0 == d }.count > 1 }) {
                throw UsageError(message: "'\(repeated.rawValue)' appears twice in --by", usage: usage)
            }
            query.by = StatsQuery.Dimension.platformBesideOSMajor(query.by)
        }
        guard let format = ResultTable.Format(rawValue: arguments.value("--format") ?? "table") else {
            throw UsageError(message: "--format must be table, csv or json", usage: usage)
        }
        let db = try openDatabase(arguments)
        let tables: [ResultTable]
        switch which {
        case "denial": tables = [try Stats.denial(db, query)]
        case "priming": tables = try Stats.priming(db, query)
        default: tables = [try Stats.picker(db, query)]
        }
        print(ResultTable.render(tables, format), terminator: "")
        if let note = try Stats.unprojectedNote(db) { printError("note: " + note) }
        if which == "priming" {
            for note in try Stats.experimentNotes(db, query) { printError("note: " + note) }
        }
        return 0
    }
}

/// A new projector once the database answers again, retrying every 1, 2, 4 ... 30 s; nil when a
/// stop is requested meanwhile. Errors other than an unreachable database end the wait.
private func reconnect(_ make: () throws -> Projector, stop: StopSignal) throws -> Projector? {
    var delay = 1.0
    var reported = false
    while !stop.requested() {
        var waited = 0.0
        while waited < delay && !stop.requested() {
            Thread.sleep(forTimeInterval: 0.1)
            waited += 0.1
        }
        if stop.requested() { break }
        do {
            return try make()
        } catch let error as PostgresError where error.code == .connectionFailure {
            if !reported { printError("the database is unavailable (\(error)); retrying up to every 30 s") }
            reported = true
            delay = min(delay * 2, 30)
        }
    }
    return nil
}

/// Set by SIGINT or SIGTERM; polled between batches.
final class StopSignal: @unchecked Sendable {
    // The signal received is only touched under the lock; the dispatch sources keep the handlers alive.
    private let lock = NSLock()
    private var received: Int32?
    private var sources: [DispatchSourceSignal] = []

    /// With `announce`, the first signal prints it, and a second one ends the process at once
    /// (exit 128 + the signal's number), for a command that may be waiting where it cannot ask
    /// `requested()` (a read from a terminal).
    init(announce: String? = nil) {
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            // Two signals in quick succession may reach the handler as one call: its count says.
            let object = source as AnyObject  // weakly: the source holds its handler
            source.setEventHandler { [weak self, weak object] in
                self?.set(number, announce, times: (object as? DispatchSourceSignal)?.data ?? 1)
            }
            source.resume()
            sources.append(source)
        }
    }

    private func set(_ number: Int32, _ announce: String?, times: UInt) {
        lock.lock()
        let again = received != nil || times > 1
        if received == nil { received = number }
        lock.unlock()
        guard let announce else { return }
        if again { _exit(128 + number) }
        printError(announce)
    }
    func requested() -> Bool { lock.lock(); defer { lock.unlock() }; return received != nil }
    /// The exit status of a command that a signal stopped: 128 + the first signal's number (130
    /// for SIGINT, 143 for SIGTERM), as a shell reports a process the signal ended.
    var exitStatus: Int32 { lock.lock(); defer { lock.unlock() }; return 128 + (received ?? SIGINT) }
}
