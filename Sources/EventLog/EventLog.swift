import Foundation
import PermissionEvents
import Postgres

/// The append-only permission event log: appends through the SQL write path
/// `audit.append_events(jsonb)` and reads in committed order.
///
///     let log = EventLog(connection: try Connection(url: "postgresql://writer@db.example/permaudit"))
///     let results = try log.append(["{\"eventId\": ...}"])
public final class EventLog {
    public let connection: Connection

    public init(connection: Connection) { self.connection = connection }

    public struct AppendResult: Equatable, Sendable {
        public enum Status: String, Sendable { case appended, duplicate }
        public var eventId: UUID
        public var position: Int64?
        public var status: Status
    }

    /// Appends wire-format events (each a JSON object text) in one call of the write path.
    /// Throws `AppendError` for an invalid event, an id conflict or a wrong expected version;
    /// then nothing of the batch is stored. An element that is not one JSON object text (empty,
    /// or two objects joined by a comma, which the array would take as two events) is an
    /// invalid event at its index, before anything is sent.
    @discardableResult
    public func append(_ events: [String], expectedVersion: Int64? = nil) throws -> [AppendResult] {
        if let index = events.firstIndex(where: { !Self.isOneObject($0) }) {
            throw AppendError(PostgresError(code: .init(AppendError.Kind.invalidEvent.rawValue),
                                            message: "events[\(index)].event: must be one JSON object", detail: "index=\(index)"))!
        }
        return try append(jsonArray: "[" + events.joined(separator: ",") + "]", expectedVersion: expectedVersion)
    }

    /// Whether `text` is, around JSON whitespace, one `{...}` whose braces and brackets pair up
    /// outside strings: what it holds is the write path's to judge.
    static func isOneObject(_ text: String) -> Bool {
        // The closing byte each open brace or bracket waits for, innermost last.
        var closers: [UInt8] = [], inString = false, escaped = false, closed = false
        for byte in text.utf8 {
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): continue
            case _ where closed: return false
            case UInt8(ascii: "{"): closers.append(UInt8(ascii: "}"))
            case UInt8(ascii: "["): guard !closers.isEmpty else { return false }; closers.append(UInt8(ascii: "]"))
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                guard closers.popLast() == byte else { return false }
                closed = closers.isEmpty
            case UInt8(ascii: "\""): guard !closers.isEmpty else { return false }; inString = true
            default: guard !closers.isEmpty else { return false }
            }
        }
        return closed
    }

    /// Appends a JSON array text of wire-format events.
    ///
    /// Outside a transaction the call is its own transaction: when PostgreSQL rolls it back as a
    /// deadlock victim or for a serialization failure, it stored nothing and runs again
    /// (`PostgresError.retryingRollbacks`; an append is idempotent by event id). Inside the
    /// caller's transaction the error is the caller's.
    @discardableResult
    public func append(jsonArray: String, expectedVersion: Int64? = nil) throws -> [AppendResult] {
        func call() throws -> [AppendResult] {
            if let expectedVersion {
                return try EventLog.results(try connection.preparedQuery(EventLog.appendSQL + ", $2)", [jsonArray, expectedVersion]))
            }
            return try EventLog.results(try connection.preparedQuery(EventLog.appendSQL + ")", [jsonArray]))
        }
        do {
            return try connection.isInTransaction ? call() : PostgresError.retryingRollbacks(call)
        } catch let error as PostgresError {
            throw AppendError(error) ?? error
        }
    }

    static let appendSQL = "select event_id, position, status from audit.append_events($1::jsonb"

    /// The stream version of the last stored event of the install `subject` of `app`, -1 when it
    /// has none: the `expectedVersion` under which the next append of that stream succeeds.
    public func streamVersion(app: String, subject: String) throws -> Int64 {
        try connection.preparedQuery("select audit.stream_version($1, $2)", [app, subject]).scalar()
    }

    static func results(_ rows: QueryResult) throws -> [AppendResult] {
        try rows.decode((UUID, Int64?, String).self).map { id, position, status in
            AppendResult(eventId: id, position: position, status: status == "appended" ? .appended : .duplicate)
        }
    }

    // MARK: Reading in committed order

    /// Where a reader is: the (transaction id, position) of the last event it has seen.
    /// `Codable` (`{"transactionId": ..., "position": ...}`), so that a reader can keep it.
    public struct Checkpoint: Hashable, Comparable, Codable, Sendable, CustomStringConvertible {
        public var transactionId: UInt64
        public var position: Int64
        public static let start = Checkpoint(transactionId: 0, position: 0)
        public init(transactionId: UInt64, position: Int64) {
            self.transactionId = transactionId
            self.position = position
        }
        public static func < (a: Checkpoint, b: Checkpoint) -> Bool {
            (a.transactionId, a.position) < (b.transactionId, b.position)
        }
        public var description: String { "(\(transactionId), \(position))" }
    }

    public struct StoredEvent: Sendable {
        public var position: Int64
        public var transactionId: UInt64
        public var eventId: UUID
        public var streamKey: Int64
        public var streamVersion: Int64
        public var type: String
        public var recordedAt: Date
        /// The stored wire-format event without `subject`, as JSON text.
        public var payload: String
        public var checkpoint: Checkpoint { Checkpoint(transactionId: transactionId, position: position) }
    }

    /// Events after `checkpoint` in the order they became visible, only below the oldest running
    /// transaction, so that an event whose position was taken earlier but committed later is
    /// returned after it commits and never skipped.
    public func read(after checkpoint: Checkpoint = .start, limit: Int = 1000) throws -> [StoredEvent] {
        let rows = try connection.query("""
            select position, transaction_id::text, event_id, stream_key, stream_version, type, recorded_at, payload::text
              from audit.read_committed($1::xid8, $2, $3)
            """, [checkpoint.transactionId, checkpoint.position, limit])
        return try rows.decode((Int64, UInt64, UUID, Int64, Int64, String, Date, String).self).map {
            StoredEvent(position: $0.0, transactionId: $0.1, eventId: $0.2, streamKey: $0.3, streamVersion: $0.4,
                        type: $0.5, recordedAt: $0.6, payload: $0.7)
        }
    }
}

extension PostgresError.Code {
    /// PA004: the cluster's transaction counter is behind the log (a logical dump restored into
    /// another cluster, 042); no append succeeds until an operator moves it past the log.
    public static let transactionCounterBehind = Self("PA004")
}

/// Why the write path refused a batch. Carries the index in the batch and never the payload.
public struct AppendError: Error, CustomStringConvertible, Sendable {
    public enum Kind: String, Sendable {
        /// PA001: an event breaks the contract.
        case invalidEvent = "PA001"
        /// PA002: an event id was stored before with different content.
        case conflict = "PA002"
        /// PA003: the stream is not at the expected version.
        case wrongExpectedVersion = "PA003"
    }

    public var kind: Kind
    /// Index of the offending event in the batch, when one event is at fault.
    public var index: Int?
    /// `field: rule` (for `invalidEvent` and `conflict`) or the server's message.
    public var reason: String
    public var underlying: PostgresError

    init?(_ error: PostgresError) {
        guard let kind = Kind(rawValue: error.code.rawValue) else { return nil }
        self.kind = kind
        self.underlying = error
        index = error.detail.flatMap { detail in
            detail.hasPrefix("index=") ? Int(detail.dropFirst("index=".count)) : nil
        }
        // 'events[3].occurredAt: rule' -> 'occurredAt: rule'
        var message = Substring(error.message)
        if message.hasPrefix("events["), let close = message.firstIndex(of: "]") {
            message = message[message.index(after: close)...]
            if message.hasPrefix(".") { message = message.dropFirst() }
        }
        reason = String(message)
    }

    public var description: String {
        if let index { return "event \(index): \(reason)" }
        return reason
    }
}

/// Opens connections as the command-line tool does: `--database-url`, else `DATABASE_URL`,
/// else the embedded cluster (created and started on first use, under `$PERMAUDIT_HOME` or
/// `./.permaudit`). A server that must not fall back to a private database when its
/// environment lacks the URL opens `Connection(url:)` itself.
public enum Database {
    public static func resolveURL(_ explicit: String?) throws -> String {
        if let explicit, !explicit.isEmpty { return explicit }
        if let env = ProcessInfo.processInfo.environment["DATABASE_URL"], !env.isEmpty { return env }
        return try EmbeddedCluster.fromEnvironment().start()
    }

    public static func connect(_ explicit: String? = nil) throws -> Connection {
        try Connection(url: try resolveURL(explicit))
    }
}
