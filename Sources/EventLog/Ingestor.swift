import Foundation
import PermissionEvents
import Postgres

/// Streams NDJSON inputs into the log through the write path, in bounded memory.
///
/// Every line is validated here first (so errors name the line); valid lines are sent in
/// batches to `audit.append_events`, which checks them again. While the server appends one batch
/// the next one is read and validated (libpq's asynchronous send).
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

    private let log: EventLog
    /// What the last `ingest` call did; after it threw in store-valid mode, what it had stored.
    public private(set) var summary = Summary()
    /// Rejected events per (occurredAt day, app, platform) as far as they can be read; recorded
    /// in `audit.intake_anomalies` with the valid events (store-valid mode).
    private var rejectedGroups: [RejectedGroup: Int] = [:]
    private var inFlight: [Pending]? = nil
    private var failed = false

    private struct Pending {
        var input: String
        var line: Int
        var text: String
    }

    public init(log: EventLog) { self.log = log }

    /// Ingests the inputs (file paths, `-` for standard input). In all-or-nothing mode the
    /// summary reports nothing appended when anything was rejected.
    public func ingest(_ inputs: [String]) throws -> Summary {
        summary = Summary()
        rejectedGroups = [:]
        failed = false
        let db = log.connection
        guard !db.isInTransaction else {
            throw IngestError("the connection is in a transaction: ingest commits its own (all or nothing, or batch by batch)")
        }
        // Store-valid mode commits batch by batch: no savepoint per batch (past 64 subtransactions
        // every row visibility check in the transaction consults pg_subtrans, measured 2.5x slower).
        if mode == .allOrNothing { try db.execute("BEGIN") }
        do {
            for input in inputs {
                try ingest(input: input)
            }
            try flush(nil)
            if mode == .allOrNothing && summary.rejected > 0 {
                try db.execute("ROLLBACK")
                summary.appended = 0
                summary.duplicates = 0
            } else {
                for (group, count) in rejectedGroups { try group.record(count, on: db) }
                if mode == .allOrNothing { try db.execute("COMMIT") }
            }
        } catch let error as IngestError where mode == .storeValid && db.isOpen {
            // An input could not be read: the batches already sent are committed, so count them
            // (and record the rejected lines) for the summary of what was stored.
            try flush(nil)
            for (group, count) in rejectedGroups { try group.record(count, on: db) }
            throw error
        } catch {
            if db.isOpen { discardPendingResult(); if mode == .allOrNothing { try? db.execute("ROLLBACK") } }
            throw error
        }
        return summary
    }

    private func ingest(input: String) throws {
        let reader = try LineReader(path: input)
        let validator = EventValidator()
        var batch: [Pending] = []
        batch.reserveCapacity(batchSize)
        while let (number, bytes) = try reader.next() {
            if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
            summary.lines += 1
            if bytes.count > LineReader.maxLineBytes {
                try reject(input, number, "event: " + EventValidator.longLineRule, bytes)
                continue
            }
            let text: String
            switch validate(bytes, validator) {
            case let .success(valid): text = valid
            case let .failure(problem):
                try reject(input, number, problem.description, bytes)
                continue
            }
            if failed { continue }  // all-or-nothing and already failing: only report errors
            batch.append(Pending(input: input, line: number, text: text))
            if batch.count >= batchSize {
                try flush(batch)
                batch.removeAll(keepingCapacity: true)
            }
            if summary.lines % 50_000 == 0 { onProgress(summary) }
        }
        if !batch.isEmpty { try flush(batch) }
    }

    private func validate(_ bytes: [UInt8], _ validator: EventValidator) -> Result<String, EventProblem> {
        validator.validate(bytes: bytes).map { _ in String(decoding: bytes, as: UTF8.self) }
    }

    private func reject(_ input: String, _ line: Int, _ reason: String, _ raw: [UInt8]) throws {
        summary.rejected += 1
        if mode == .allOrNothing { failed = true } else { rejectedGroups[RejectedGroup(raw), default: 0] += 1 }
        try onReject(Rejection(input: input, line: line, reason: reason, raw: raw))
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

    private func collect(_ batch: [Pending], retries: Int = 0) throws {
        do {
            let results = try EventLog.results(try log.connection.receiveResult())
            count(results)
        } catch let error as PostgresError where mode == .storeValid && error.isRetryableRollback && retries < 5 {
            // The batch's own transaction was a deadlock victim and stored nothing: send it again.
            try send(batch)
            try collect(batch, retries: retries + 1)
        } catch let error as PostgresError {
            guard let refusal = AppendError(error), let index = refusal.index, index < batch.count else {
                // A value the server cannot store (SQLSTATE class 22, e.g. a number out of range):
                // find the event(s) one by one.
                guard error.code.rawValue.hasPrefix("22") else { throw error }
                try isolate(batch, cause: error)
                return
            }
            let culprit = batch[index]
            try reject(culprit.input, culprit.line, refusal.reason, Array(culprit.text.utf8))
            guard mode == .storeValid else { return }
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
    /// those the server refuses. In all-or-nothing mode the transaction is already lost: only report.
    private func isolate(_ batch: [Pending], cause: PostgresError) throws {
        guard mode == .storeValid else {
            try reject(batch[0].input, batch[0].line, "event: refused by the database (SQLSTATE \(cause.code.rawValue)) in the batch starting at this line", [])
            return
        }
        for pending in batch {
            do {
                count(try log.append([pending.text]))
            } catch let error as AppendError {
                try reject(pending.input, pending.line, error.reason, Array(pending.text.utf8))
            } catch let error as PostgresError where error.code.rawValue.hasPrefix("22") {
                try reject(pending.input, pending.line, "event: refused by the database (SQLSTATE \(error.code.rawValue))", Array(pending.text.utf8))
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
        if let app = value?["app"]?.stringValue, (1...255).contains(app.utf8.count),
           app.utf8.allSatisfy({ $0 < 0x80 && (isalnum(Int32($0)) != 0 || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D) }) {
            self.app = app
        }
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

/// Reads lines from a file or standard input in fixed-size chunks. Lines longer than
/// `maxLineBytes` are truncated (and then rejected by the caller), so memory stays bounded.
final class LineReader {
    static let maxLineBytes = EventValidator.maxLineBytes  // well below the 1 MiB buffer
    private let fd: Int32
    private let ownsDescriptor: Bool
    /// The path, or "standard input", for errors.
    private let name: String
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    private var start = 0
    private var end = 0
    private var eof = false
    private var lineNumber = 0

    init(path: String) throws {
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
    func next() throws -> (Int, [UInt8])? {
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

public struct IngestError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
