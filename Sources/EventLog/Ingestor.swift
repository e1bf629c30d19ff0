import Foundation
import PermissionEvents
import Postgres

/// Streams NDJSON inputs into the log through the write path, in bounded memory.
///
/// Every line is validated here first (so errors name the line); valid lines are sent in
/// batches to `audit.append_events`, which checks them again.
///
/// All or nothing, the inputs are one transaction, which keeps every install's lock until it
/// commits. The valid lines are first copied into a temporary table (no lock taken: an invalid
/// line ends the ingest before it has locked anything), then appended in batches in input
/// order, so that positions follow the lines. Those batches lock installs out of order across
/// calls and could deadlock with another writer: the first time this try waits for a lock longer
/// than 200 ms, it rolls back and starts again with its batches in (app, install, input order)
/// order, the order in which every call of the write path locks, so the whole transaction locks
/// in one global order and cannot deadlock with them. Each install's events keep their input
/// order either way.
///
/// Storing the valid lines, each batch is its own transaction and is sent in input order; while
/// the server appends one batch the next one is read and validated (libpq's asynchronous send).
public final class Ingestor {
    public enum Mode: Sendable {
        /// Nothing from the inputs is stored if any line is invalid (one transaction).
        case allOrNothing
        /// Valid lines are stored, each batch in its own transaction (an interrupted ingest keeps
        /// the batches already committed; ingesting again stores the rest, as duplicates are
        /// skipped); invalid ones are handed to `onReject`.
        case storeValid
    }

    public struct Rejection: Sendable {
        public var input: String
        public var line: Int
        public var reason: String
        /// The raw line (only for the rejects file; never logged).
        public var raw: [UInt8]
    }

    public struct Summary: Sendable, Equatable {
        public var appended = 0
        public var duplicates = 0
        public var rejected = 0
        public var lines = 0
        public init(appended: Int = 0, duplicates: Int = 0, rejected: Int = 0, lines: Int = 0) {
            self.appended = appended
            self.duplicates = duplicates
            self.rejected = rejected
            self.lines = lines
        }
    }

    public var mode: Mode = .allOrNothing
    public var batchSize = 1000
    public var onReject: (Rejection) throws -> Void = { _ in }
    public var onProgress: (Summary) -> Void = { _ in }
    /// Asked before each block of lines is read and each batch is appended: true ends the
    /// ingest with `IngestInterrupted` (all or nothing: rolled back; store-valid mode: the
    /// batches sent so far are committed and counted, the rejected lines recorded).
    public var shouldStop: () -> Bool = { false }

    private let log: EventLog
    /// What the last `ingest` call did; after it threw in store-valid mode, what it had stored.
    public private(set) var summary = Summary()
    /// All or nothing: whether the last `ingest` stopped looking for the lines the write path
    /// refuses before the end (at 100 rejected lines, or at a deadlock): there may be more.
    public private(set) var stoppedLookingForRefusals = false
    /// Rejected events per (occurredAt day, app, platform) as far as they can be read; recorded
    /// in `audit.intake_anomalies` with the valid events (store-valid mode).
    private var rejectedGroups: [RejectedGroup: Int] = [:]
    private var inFlight: [Pending]? = nil
    private var failed = false
    /// Seconds the server's clock is ahead of this machine's, read when the ingest starts.
    private var clockOffset: TimeInterval = 0

    private struct Pending {
        var input: String
        var line: Int
        /// The install, as the write path orders its locks (all or nothing sorts by it).
        var app: String
        var subject: String
        var text: String
    }

    public init(log: EventLog) { self.log = log }

    /// Ingests the inputs (file paths, `-` for standard input). In all-or-nothing mode the
    /// summary reports nothing appended when anything was rejected.
    public func ingest(_ inputs: [String]) throws -> Summary {
        summary = Summary()
        stoppedLookingForRefusals = false
        rejectedGroups = [:]
        failed = false
        guard !log.connection.isInTransaction else {
            throw IngestError("the connection is in a transaction: ingest commits its own (all or nothing, or batch by batch)")
        }
        // The 24 h rule is against the server's clock, not this machine's.
        clockOffset = try log.connection.clockOffset()
        switch mode {
        case .allOrNothing: try ingestAllOrNothing(inputs)
        case .storeValid: try ingestStoringValid(inputs)
        }
        return summary
    }

    /// Reads, validates and hands each valid line of one input to `accept`; rejects the others.
    /// Lines are validated in blocks, on every core (all or nothing, the server has little to do
    /// while the lines are read).
    private func read(_ input: String, _ accept: (Pending) throws -> Void) throws {
        let reader = try LineReader(path: input)
        var block = LineBlock()
        var atEnd = false
        while !atEnd {
            if shouldStop() { throw IngestInterrupted() }
            block.removeAll()
            while !block.isFull {
                guard let (number, bytes) = try reader.next() else { atEnd = true; break }
                if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
                block.append(number, bytes)
            }
            for (number, bytes, result) in block.validated(now: Date().addingTimeInterval(clockOffset)) {
                summary.lines += 1
                let event: ValidatedEvent
                switch result {
                case let .success(valid): event = valid
                case let .failure(problem):
                    try reject(input, number, problem.description, bytes)
                    continue
                }
                if failed { continue }  // all-or-nothing and already failing: only report errors
                try accept(Pending(input: input, line: number, app: event.app, subject: event.subject,
                                   text: String(decoding: bytes, as: UTF8.self)))
                if summary.lines % 50_000 == 0 { onProgress(summary) }
            }
        }
    }

    /// Store-valid mode: each batch in its own transaction, sent in input order (no savepoint per
    /// batch: past 64 subtransactions every row visibility check in the transaction consults
    /// pg_subtrans, measured 2.5x slower).
    private func ingestStoringValid(_ inputs: [String]) throws {
        let db = log.connection
        var batch: [Pending] = []
        batch.reserveCapacity(batchSize)
        do {
            for input in inputs {
                try read(input) { pending in
                    batch.append(pending)
                    if batch.count >= batchSize {
                        try flush(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                // A stop asked for as the input ended (its producer interrupted with it) holds too.
                if shouldStop() { throw IngestInterrupted() }
                try flush(batch)  // the rest of this input, before the next one is opened
                batch.removeAll(keepingCapacity: true)
            }
            try flush(nil)
            for (group, count) in rejectedGroups { try group.record(count, on: db) }
        } catch where db.isOpen && !(error is PostgresError || error is AppendError) {
            // Not the write path's error (an input that cannot be read, a rejects file that cannot
            // be written, a stop): the batches already sent are committed, so count them (and
            // record the rejected lines) for the summary of what was stored.
            try flush(nil)
            for (group, count) in rejectedGroups { try group.record(count, on: db) }
            throw error
        } catch {
            if db.isOpen { discardPendingResult() }
            throw error
        }
    }

    /// All or nothing: the valid lines are copied into a temporary table of the session, outside
    /// any transaction (nothing is locked while the inputs are read), then appended in one
    /// transaction: in input order, and, should another writer make it wait, again in the write
    /// path's lock order (see the type's documentation).
    private func ingestAllOrNothing(_ inputs: [String]) throws {
        let db = log.connection
        defer { if db.isOpen { try? db.execute("drop table if exists pg_temp.permaudit_ingest, pg_temp.permaudit_ingest_staged") } }
        try db.execute("create temporary table permaudit_ingest (input integer, line bigint, app text, subject text, event text)")
        try db.copyIn("copy permaudit_ingest (input, line, app, subject, event) from stdin") { writer in
            for (index, input) in inputs.enumerated() {
                try read(input) { pending in
                    try writer.write("\(index)\t\(pending.line)\t")
                    try writer.writeTextField(pending.app)
                    try writer.write("\t")
                    try writer.writeTextField(pending.subject)
                    try writer.write("\t")
                    try writer.writeTextField(pending.text)
                    try writer.write("\n")
                }
            }
        }
        guard !failed else { return }
        // k: input order; s: the write path's lock order (install, then input order).
        let staged = try db.query("""
            create temporary table permaudit_ingest_staged as
            select row_number() over (order by input, line) as k,
                   row_number() over (order by app, subject, input, line) as s, input, line, event
              from permaudit_ingest
            """).affectedRows
        try db.execute("""
            drop table permaudit_ingest;
            alter table permaudit_ingest_staged add primary key (k);
            create unique index on permaudit_ingest_staged (s)
            """)
        // In input order, the first try gives way at its first long lock wait: another writer
        // holds an install it needs, and a deadlock is possible. In lock order, a deadlock can only
        // be with a writer that does not lock in that order (a client's transaction of several
        // calls), which finishes or gives way in turn, and a serialization failure only follows an
        // erasure; the bound is a guard.
        var order = "k"
        for attempt in 1... {
            do {
                return try appendStaged(staged, order: order, inputs)
            } catch let error as PostgresError where db.isOpen && Self.isLockConflict(error, firstTry: order == "k") {
                try db.execute("ROLLBACK")
                guard attempt < 20 else { throw error }
                order = "s"
            }
        }
    }

    /// How long the first try, in input order, waits for a lock before it starts again in lock order.
    static let inputOrderLockWait = "200ms"

    /// A deadlock, a serialization failure (the write path's answer when an install it waited for
    /// was erased and another writer holds its new stream: "run the call again"), or, on the first
    /// try, its lock wait given up. On a later try a lock time-out is the session's own setting,
    /// and it stands.
    private static func isLockConflict(_ error: PostgresError, firstTry: Bool) -> Bool {
        error.code == .deadlockDetected || error.code == .serializationFailure || (firstTry && error.code == .lockNotAvailable)
    }

    /// One try of the all-or-nothing transaction, the staged lines in `order` (k or s).
    private func appendStaged(_ staged: Int, order: String, _ inputs: [String]) throws {
        let db = log.connection
        summary.appended = 0  // a try before this one was rolled back
        summary.duplicates = 0
        try db.execute("BEGIN")
        if order == "k" {
            // The session's own time-out where it is shorter; reset at the end of the transaction.
            try db.query("""
                select set_config('lock_timeout', $1, true)
                 where current_setting('lock_timeout') = '0' or current_setting('lock_timeout')::interval > $1::interval
                """, [Self.inputOrderLockWait])
        }
        var done = 0
        while done < staged {
            if shouldStop() {
                try? db.execute("ROLLBACK")
                throw IngestInterrupted()
            }
            let upTo = min(done + batchSize, staged)
            do {
                count(try EventLog.results(try db.preparedQuery("""
                    select event_id, position, status
                      from audit.append_events((select ('[' || string_agg(event, ',' order by \(order)) || ']')::jsonb
                                                  from permaudit_ingest_staged where \(order) > $1 and \(order) <= $2))
                    """, [done, upTo])))
            } catch let error as PostgresError where db.isOpen && Self.isRefusal(error) {
                try? db.execute("ROLLBACK")
                summary.appended = 0
                summary.duplicates = 0
                try reportRefusals(inputs)
                if summary.rejected == 0 {
                    // The search ended before it met the refusal again (a deadlock with another
                    // writer, a time-out, a clock rule at its edge): name this one, as refused.
                    let refusal = AppendError(error)
                    let (input, line) = try db.query("select input, line from permaudit_ingest_staged where \(order) = $1",
                                                     [done + 1 + (refusal?.index ?? 0)]).decode((Int, Int).self)[0]
                    try reject(inputs[input], line, Self.reason(error) + (refusal == nil ? " in a batch of \(upTo - done) events with this line" : ""), [])
                }
                return
            } catch let error as PostgresError where Self.isLockConflict(error, firstTry: order == "k") {
                throw error  // the caller rolls back and tries again
            } catch {
                if db.isOpen { try? db.execute("ROLLBACK") }
                throw error
            }
            done = upTo
            if done % 50_000 < batchSize { onProgress(summary) }
        }
        try db.execute("COMMIT")
    }

    /// An event the write path refuses (with its index in the batch), or a value the server cannot
    /// store (SQLSTATE class 22, without one).
    private static func isRefusal(_ error: PostgresError) -> Bool {
        AppendError(error) != nil || error.code.rawValue.hasPrefix("22")
    }

    /// `field: rule` of a refusal, or the SQLSTATE of a value the server cannot store.
    private static func reason(_ error: PostgresError) -> String {
        AppendError(error)?.reason ?? "event: refused by the database (SQLSTATE \(error.code.rawValue))"
    }

    /// All or nothing, once the write path refused an event: every line it would refuse, so that
    /// a file is fixed in one run, not one per conflict. The staged lines are appended again in
    /// input order, the order in which the first copy of an event id counts (as when storing the
    /// valid lines), in a transaction that is rolled back: each batch in a savepoint, a refused
    /// line left out of its batch's next try; a batch refused without an index (a value the
    /// server cannot store) one line at a time. A later copy of an id whose first copy this run
    /// appended is blamed on that copy ("line N has this id"). Stops at 100 rejected lines in all,
    /// or at a deadlock with another writer (it takes the installs' locks in input order).
    private func reportRefusals(_ inputs: [String]) throws {
        let db = log.connection
        try db.execute("create temporary table permaudit_ingest_appended (event_id uuid)")
        defer { try? db.execute("drop table if exists pg_temp.permaudit_ingest_appended") }
        let rows: Int = try db.query("select count(*) from pg_temp.permaudit_ingest_staged").scalar()
        func append(_ lines: [Int]) throws {
            try db.preparedQuery("""
                insert into pg_temp.permaudit_ingest_appended (event_id)
                select r.event_id
                  from audit.append_events((select ('[' || string_agg(event, ',' order by k) || ']')::jsonb
                                              from pg_temp.permaudit_ingest_staged where k = any($1::bigint[]))) r
                 where r.status = 'appended'
                """, [lines])
        }
        var refused: [(n: Int, reason: String, conflict: Bool)] = []
        try db.execute("BEGIN")
        defer { try? db.execute("ROLLBACK") }
        var done = 0
        do {
            checking: while done < rows && summary.rejected + refused.count < 100 {
                var pending = Array(done + 1...min(done + batchSize, rows))
                while !pending.isEmpty {
                    // Each refusal sends the rest of its batch again: stop at the cap within a batch too.
                    guard summary.rejected + refused.count < 100 else { break checking }
                    do {
                        try db.savepoint("permaudit_ingest_check") { try append(pending) }
                        break
                    } catch let error as PostgresError where db.isOpen && Self.isRefusal(error) {
                        if let refusal = AppendError(error), let index = refusal.index, index < pending.count {
                            refused.append((pending.remove(at: index), refusal.reason, refusal.kind == .conflict))
                            continue
                        }
                        for line in pending where summary.rejected + refused.count < 100 {
                            do {
                                try db.savepoint("permaudit_ingest_check") { try append([line]) }
                            } catch let error as PostgresError where db.isOpen && Self.isRefusal(error) {
                                refused.append((line, Self.reason(error), AppendError(error)?.kind == .conflict))
                            }
                        }
                        pending = []
                    }
                }
                done += batchSize
            }
        } catch let error as PostgresError where db.isOpen && !Self.isRefusal(error) {
            // A deadlock with another writer (the search locks installs in input order), a lock
            // or statement time-out: report what was found.
        }
        if done < rows || refused.count + summary.rejected >= 100 { stoppedLookingForRefusals = true }
        let refusedLines = refused.map(\.n)
        for (n, reason, conflict) in refused.sorted(by: { $0.n < $1.n }) {
            // The line, and for a conflict the earlier copy of its id that this search appended.
            let (input, line, firstInput, firstLine) = try db.query("""
                select r.input, r.line, f.input, f.line
                  from pg_temp.permaudit_ingest_staged r
                  left join lateral (
                      select c.input, c.line from pg_temp.permaudit_ingest_staged c
                       where $2 and (c.event::jsonb->>'eventId')::uuid = (r.event::jsonb->>'eventId')::uuid
                         and c.k < r.k and c.k <> all($3::bigint[])
                         and exists (select from pg_temp.permaudit_ingest_appended a
                                      where a.event_id = (r.event::jsonb->>'eventId')::uuid)
                       order by c.k limit 1) f on true
                 where r.k = $1
                """, [n, conflict, refusedLines]).decode((Int, Int, Int?, Int?).self)[0]
            var because = reason
            if let firstInput, let firstLine {
                because = "eventId: " + (firstInput == input ? "line \(firstLine)" : "line \(firstLine) of \(inputs[firstInput])") + " has this id with different content"
            }
            try reject(inputs[input], line, because, [])
        }
    }

    private func reject(_ input: String, _ line: Int, _ reason: String, _ raw: [UInt8]) throws {
        if mode == .allOrNothing { failed = true } else { rejectedGroups[RejectedGroup(raw), default: 0] += 1 }
        try onReject(Rejection(input: input, line: line, reason: reason, raw: raw))
        summary.rejected += 1  // once handed on (written to the rejects file)
    }

    /// Sends `batch` (if any) and collects the previous batch's result.
    private func flush(_ batch: [Pending]?) throws {
        if let previous = inFlight {
            inFlight = nil
            try collect(previous)
        }
        guard let batch, !batch.isEmpty, !failed else { return }
        try send(batch)
        inFlight = batch
    }

    private func send(_ batch: [Pending]) throws {
        try log.connection.sendQuery(EventLog.appendSQL + ")", ["[" + batch.map(\.text).joined(separator: ",") + "]"])
    }

    /// Collects a store-valid batch's result; a refused event is rejected and the rest sent again.
    private func collect(_ batch: [Pending], retries: Int = 0) throws {
        do {
            let results = try EventLog.results(try log.connection.receiveResult())
            count(results)
        } catch let error as PostgresError where error.isRetryableRollback && retries < 5 {
            // The batch's own transaction was a deadlock victim and stored nothing: send it again.
            PostgresError.pauseBeforeRetry(attempt: retries + 1)
            try send(batch)
            try collect(batch, retries: retries + 1)
        } catch let error as PostgresError {
            guard let refusal = AppendError(error), let index = refusal.index, index < batch.count else {
                // A value the server cannot store (SQLSTATE class 22, e.g. a number out of range):
                // find the event(s) one by one.
                guard error.code.rawValue.hasPrefix("22") else { throw error }
                try isolate(batch)
                return
            }
            let culprit = batch[index]
            try reject(culprit.input, culprit.line, refusal.reason, Array(culprit.text.utf8))
            // The refused call stored nothing: store the rest of the batch, one call at a time until clean.
            var rest = batch
            rest.remove(at: index)
            if !rest.isEmpty {
                try send(rest)
                try collect(rest)
            }
        }
    }

    /// Appends the events of a refused batch one at a time, each in its own transaction, rejecting
    /// those the server refuses.
    private func isolate(_ batch: [Pending]) throws {
        for pending in batch {
            do {
                count(try log.append([pending.text]))
            } catch let error as AppendError {
                try reject(pending.input, pending.line, error.reason, Array(pending.text.utf8))
            } catch let error as PostgresError where error.code.rawValue.hasPrefix("22") {
                try reject(pending.input, pending.line, Self.reason(error), Array(pending.text.utf8))
            }
        }
    }

    private func count(_ results: [EventLog.AppendResult]) {
        for result in results {
            if result.status == .appended { summary.appended += 1 } else { summary.duplicates += 1 }
        }
    }

    /// Drops the result of a batch in flight (after an error: the caller is giving up).
    private func discardPendingResult() {
        if inFlight != nil {
            inFlight = nil
            _ = try? log.connection.receiveResult()
        }
    }
}

/// What can be read of a rejected event for the intake counts (`audit.record_rejected`): its day,
/// app and platform when they are well-formed, else nil (the rest of the event is never kept).
public struct RejectedGroup: Hashable, Sendable {
    public var day: String?
    public var app: String?
    public var platform: String?

    public init(_ raw: [UInt8]) {
        self.init(raw.withUnsafeBufferPointer { try? JSONParser.parse(bytes: $0) })
    }

    public init(_ value: JSONValue?) {
        if let app = value?["app"]?.stringValue, EventValidator.isApp(app) { self.app = app }
        if let platform = value?["platform"]?.stringValue, platform == "ios" || platform == "android" {
            self.platform = platform
        }
        if let text = value?["occurredAt"]?.stringValue, let date = RFC3339.parse(text) {
            day = ISO8601DateFormatter.string(from: date, timeZone: TimeZone(identifier: "UTC")!, formatOptions: [.withFullDate])
        }
    }

    /// Records `count` rejected events of this group in the caller's transaction.
    public func record(_ count: Int, on connection: Connection) throws {
        try connection.query("select audit.record_rejected($1::date, $2, $3, $4)", [day, app, platform, count])
    }
}

/// Lines read and not yet validated: at most 1024 lines or 4 MiB (plus one line), so that memory
/// stays bounded. `validated()` validates them on every core and returns them in order.
struct LineBlock {
    private var lines: [(number: Int, bytes: [UInt8])] = []
    private var byteCount = 0

    var isFull: Bool { lines.count >= 1024 || byteCount >= 4 << 20 }

    mutating func append(_ number: Int, _ bytes: [UInt8]) {
        lines.append((number, bytes))
        byteCount += bytes.count
    }

    mutating func removeAll() {
        lines.removeAll(keepingCapacity: true)
        byteCount = 0
    }

    func validated(now: Date) -> [(Int, [UInt8], Result<ValidatedEvent, EventProblem>)] {
        let results = Results(count: lines.count)
        let lines = self.lines
        let parts = min(ProcessInfo.processInfo.activeProcessorCount, max(1, lines.count / 64))
        DispatchQueue.concurrentPerform(iterations: parts) { part in
            let validator = EventValidator(now: now)
            for i in stride(from: part, to: lines.count, by: parts) {
                results.set(i, validator.validate(bytes: lines[i].bytes))
            }
        }
        return lines.indices.map { (lines[$0].number, lines[$0].bytes, results.get($0)) }
    }

    /// One slot per line, in memory this object owns; each slot is written by one thread, and
    /// read after all have finished.
    private final class Results: @unchecked Sendable {
        private let slots: UnsafeMutableBufferPointer<Result<ValidatedEvent, EventProblem>?>
        init(count: Int) {
            slots = .allocate(capacity: count)
            slots.initialize(repeating: nil)
        }
        deinit {
            slots.deinitialize()
            slots.deallocate()
        }
        func set(_ index: Int, _ result: Result<ValidatedEvent, EventProblem>) { slots[index] = result }
        func get(_ index: Int) -> Result<ValidatedEvent, EventProblem> { slots[index]! }
    }
}

/// Reads lines from a file or standard input in fixed-size chunks. Lines longer than
/// `maxLineBytes` are truncated (and then rejected by the caller), so memory stays bounded.
public final class LineReader {
    public static let maxLineBytes = EventValidator.maxLineBytes  // well below the 1 MiB buffer
    private let fd: Int32
    private let ownsDescriptor: Bool
    /// The path, or "standard input", for errors.
    private let name: String
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    private var start = 0
    private var end = 0
    private var eof = false
    private var lineNumber = 0

    public init(path: String) throws {
        name = path == "-" ? "standard input" : path
        if path == "-" {
            fd = 0
            ownsDescriptor = false
        } else {
            fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw IngestError("\(path): cannot open (\(String(cString: strerror(errno))))") }
            ownsDescriptor = true
        }
    }

    deinit { if ownsDescriptor { close(fd) } }

    /// The next line (without its line break, LF or CRLF; the first line without a UTF-8 byte
    /// order mark, which RFC 8259 lets a reader ignore) and its 1-based number, or nil at the end.
    public func next() throws -> (Int, [UInt8])? {
        guard case (let number, var line)? = try nextRaw() else { return nil }
        if line.last == 0x0D && line.count <= Self.maxLineBytes { line.removeLast() }  // (not a truncated one)
        if number == 1 && line.starts(with: [0xEF, 0xBB, 0xBF]) { line.removeFirst(3) }
        return (number, line)
    }

    private func nextRaw() throws -> (Int, [UInt8])? {
        var overflow: [UInt8]? = nil
        while true {
            if let newline = buffer[start..<end].firstIndex(of: 0x0A) {
                lineNumber += 1
                var line = overflow ?? Array(buffer[start..<newline])
                if overflow != nil { line = Array(line.prefix(Self.maxLineBytes + 1)) }
                start = newline + 1
                return (lineNumber, line)
            }
            if eof {
                guard start < end || overflow != nil else { return nil }
                lineNumber += 1
                let line = overflow ?? Array(buffer[start..<end])
                start = end
                return (lineNumber, line)
            }
            // Keep a partial line: move it to the front, or, if it is already too long, keep a prefix.
            if end - start > Self.maxLineBytes {
                if overflow == nil { overflow = Array(buffer[start..<(start + Self.maxLineBytes + 1)]) }
                start = end
            }
            if start > 0 {
                buffer.withUnsafeMutableBufferPointer { b in
                    _ = memmove(b.baseAddress!, b.baseAddress! + start, end - start)
                }
                end -= start
                start = 0
            }
            let count = buffer.withUnsafeMutableBufferPointer { b in read(fd, b.baseAddress! + end, b.count - end) }
            if count < 0 {
                if errno == EINTR { continue }
                throw IngestError("\(name): read failed (\(String(cString: strerror(errno))))")
            }
            if count == 0 { eof = true } else { end += count }
        }
    }
}

/// `Ingestor.shouldStop` said stop.
public struct IngestInterrupted: Error, CustomStringConvertible, Sendable {
    public var description: String { "interrupted" }
}

public struct IngestError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
