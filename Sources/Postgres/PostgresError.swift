import CLibPQ
import Glibc

/// An error reported by PostgreSQL or by libpq.
///
/// The plain `description` names the SQLSTATE and the server's primary message only: details,
/// hints and bound values may contain data (event payloads, subject ids), so they are available
/// as properties and never printed unless a caller asks for them. Some primary messages quote
/// the value a statement could not take (`invalid input syntax for type integer: "..."`): the
/// write path's own errors never do (`audit.append_events` names the field and the rule), but a
/// query of your own that casts client data may.
///
///     catch let error as PostgresError where error.code == .uniqueViolation { ... }
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    /// A five-character SQLSTATE code (https://www.postgresql.org/docs/current/errcodes-appendix.html).
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let uniqueViolation = Code("23505")
        public static let checkViolation = Code("23514")
        public static let insufficientPrivilege = Code("42501")
        public static let undefinedTable = Code("42P01")
        public static let serializationFailure = Code("40001")
        public static let deadlockDetected = Code("40P01")
        public static let queryCanceled = Code("57014")
        public static let adminShutdown = Code("57P01")
        public static let cannotConnectNow = Code("57P03")
        public static let lockNotAvailable = Code("55P03")
        public static let objectNotInPrerequisiteState = Code("55000")
        public static let invalidTextRepresentation = Code("22P02")
        public static let duplicateDatabase = Code("42P04")
        public static let activeSQLTransaction = Code("25001")
        public static let inFailedSQLTransaction = Code("25P02")
        public static let datetimeFieldOverflow = Code("22008")
        public static let raiseException = Code("P0001")
        /// Not a server code: libpq could not reach the server or lost the connection.
        public static let connectionFailure = Code("08006")
        /// Not a server code: libpq cannot parse the connection URL or key=value string.
        public static let invalidConnectionString = Code("XX0CS")
        /// Not a server code: a value in a result could not be decoded into the requested type,
        /// or the row or column asked for is not in the result.
        public static let decodingFailure = Code("XX0DE")
        /// Not a server code: the library was called against its contract (a statement other
        /// than a COPY given to `copyIn`/`copyOut`, a time-out that is not a number, a result
        /// asked for with nothing sent, a second statement sent before the first one's result).
        public static let misuse = Code("XX0MU")
        /// A NUL character (U+0000) in text for the server, which PostgreSQL text cannot hold;
        /// refused before anything is sent (the C string would end at it), as the server
        /// refuses one in data (`invalid byte sequence`).
        public static let characterNotInRepertoire = Code("22021")
    }

    public var code: Code
    public var message: String
    public var detail: String?
    public var hint: String?
    public var severity: String?

    public init(code: Code, message: String, detail: String? = nil, hint: String? = nil, severity: String? = nil) {
        self.code = code
        self.message = message
        self.detail = detail
        self.hint = hint
        self.severity = severity
    }

    public var description: String { "PostgreSQL \(code.rawValue): \(message)" }

    /// Whether the statement may succeed if run again as it was, on the same connection: the
    /// transaction was rolled back for a concurrency reason (class 40: serialization failure,
    /// deadlock), a lock or statement time-out or a cancel ended it (55P03, 57014), or the
    /// server ran short of a resource (class 53: disk full, out of memory, too many connections).
    public var isTransient: Bool {
        code.rawValue.hasPrefix("40") || code.rawValue.hasPrefix("53") || code == .lockNotAvailable || code == .queryCanceled
    }

    /// Whether PostgreSQL rolled the transaction back so that it can run again: a deadlock
    /// victim (40P01) or a serialization failure (40001).
    public var isRetryableRollback: Bool { code == .deadlockDetected || code == .serializationFailure }

    /// Runs `body`, a whole transaction, again when PostgreSQL rolls it back as a deadlock victim
    /// or for a serialization failure (`isRetryableRollback`: it changed nothing), up to 5 more
    /// times, after a pause (`pauseBeforeRetry`). Other errors, and the sixth rollback, are thrown.
    public static func retryingRollbacks<T>(_ body: () throws -> T) throws -> T {
        var attempt = 0
        while true {
            do {
                return try body()
            } catch let error as PostgresError where error.isRetryableRollback && attempt < 5 {
                attempt += 1
                pauseBeforeRetry(attempt: attempt)
            }
        }
    }

    /// Sleeps 5-20 ms times `attempt` (1, 2, ...; at most 5) before a rolled-back transaction runs
    /// again: the two sides of a deadlock, run again at once, can meet again.
    public static func pauseBeforeRetry(attempt: Int) {
        usleep(UInt32.random(in: 5_000...20_000) * UInt32(min(max(attempt, 1), 5)))
    }

    init(result: OpaquePointer, fallback: String) {
        func field(_ key: Int32) -> String? {
            guard let value = PQresultErrorField(result, key) else { return nil }
            return String(cString: value)
        }
        let primary = field(permaudit_PG_DIAG_MESSAGE_PRIMARY)
        var message = primary ?? fallback
        if primary == nil, let text = PQresultErrorMessage(result) {
            let trimmed = Self.withoutContext(String(cString: text)).trimmingWhitespace()
            if !trimmed.isEmpty { message = trimmed }
        }
        self.init(
            code: field(permaudit_PG_DIAG_SQLSTATE).map(Code.init(rawValue:)) ?? .connectionFailure,
            message: message,
            detail: field(permaudit_PG_DIAG_MESSAGE_DETAIL),
            hint: field(permaudit_PG_DIAG_MESSAGE_HINT),
            severity: field(permaudit_PG_DIAG_SEVERITY)
        )
    }

    /// libpq's own error message after `context`: a lost connection (08006) unless `code` says
    /// otherwise.
    static func connection(_ connection: OpaquePointer?, _ context: String, code: Code = .connectionFailure) -> PostgresError {
        var text = context
        if let connection, let raw = PQerrorMessage(connection) {
            let message = withoutContext(String(cString: raw)).trimmingWhitespace()
            if !message.isEmpty { text = "\(context): \(message)" }
        }
        return PostgresError(code: code, message: text)
    }

    /// libpq's text of an error without the `CONTEXT:` part the server sent with it: for a
    /// statement inside a function, the function's SQL, many lines of it. The lines libpq adds
    /// itself after it (`server closed the connection unexpectedly`, ...) stay.
    static func withoutContext(_ text: String) -> String {
        var skipping = false
        return text.split(separator: "\n", omittingEmptySubsequences: false).filter { line in
            if line.hasPrefix("CONTEXT:") { skipping = true }
            else if skipping, ["server closed", "connection to server", "no connection", "could not ", "SSL ", "terminating connection",
                               "FATAL:", "PANIC:", "ERROR:"].contains(where: { line.hasPrefix($0) }) {
                skipping = false
            }
            return !skipping
        }.joined(separator: "\n")
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var scalars = Substring(self)
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        return String(scalars)
    }
}

/// A notice or warning the server sent (`Connection.onNotice`): not an error, the statement
/// goes on. Its message may quote data, as an error's may.
public struct PostgresNotice: CustomStringConvertible, Sendable {
    /// `NOTICE`, `WARNING`, `INFO`, ... (not localized).
    public var severity: String
    public var code: PostgresError.Code
    public var message: String

    init(result: OpaquePointer) {
        func field(_ key: Int32) -> String? { PQresultErrorField(result, key).map { String(cString: $0) } }
        severity = field(permaudit_PG_DIAG_SEVERITY) ?? "NOTICE"
        code = PostgresError.Code(field(permaudit_PG_DIAG_SQLSTATE) ?? "00000")
        message = field(permaudit_PG_DIAG_MESSAGE_PRIMARY) ?? ""
    }

    public var description: String { "\(severity.lowercased()): \(message)" }
}
