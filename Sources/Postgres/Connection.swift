import CLibPQ
import Foundation

/// One connection to PostgreSQL. Owns its `PGconn` and closes it in `deinit`.
///
/// A connection is used from one thread at a time (libpq's rule); open one per thread. It sets
/// its session first (`sessionSettings`): unqualified names resolve in `pg_catalog` and
/// `pg_temp` only, so name other tables with their schema. `DISCARD ALL` or `RESET ALL` sent
/// through it reset those settings too: open a new connection instead.
///
///     let db = try Connection(url: "postgresql:///permaudit?host=/tmp")
///     let n: Int = try db.query("select count(*) from audit.events").scalar()
public final class Connection {
    private let handle: OpaquePointer
    /// The statements `preparedQuery` has prepared on this connection: SQL text -> statement name.
    private var preparedNames: [String: String] = [:]
    private var preparedCount = 0

    /// Called with each notice or warning the server sends (`RAISE NOTICE`, a deprecation
    /// warning), on the thread that is using the connection. Unset (the default), notices are
    /// dropped: they may quote data, and never reach standard error.
    public var onNotice: ((PostgresNotice) -> Void)?

    /// Seconds to wait for the server's answer to a statement of `query`, `preparedQuery` or
    /// `execute` (nil, the default: as long as it takes). Past it the connection is shut down and
    /// the statement fails with 08006: a hung server (stopped, or a network that drops packets)
    /// cannot hold the caller's thread. Whether the server carried the statement out is unknown
    /// (a transaction that did not commit did not happen; an append sent again answers duplicate).
    public var responseTimeout: Double?

    /// Opens a connection from a libpq URL or key=value string
    /// (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING).
    public init(url: String) throws {
        try Self.refuseNUL(url, in: "the database URL")
        try Self.checkSyntax(url)
        guard let handle = PQconnectdb(url) else {
            throw PostgresError(code: .connectionFailure, message: "out of memory opening a connection")
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            var error = PostgresError.connection(handle, "cannot connect")
            PQfinish(handle)
            error.message = Self.redactingPassword(error.message, url: url)
            throw error
        }
        self.handle = handle
        // Server notices go to `onNotice`, never to libpq's default of stderr. The connection
        // outlives the handle (deinit finishes it), so the unretained pointer stays valid.
        PQsetNoticeReceiver(handle, { context, result in
            guard let context, let result else { return }
            let connection = Unmanaged<Connection>.fromOpaque(context).takeUnretainedValue()
            connection.onNotice?(PostgresNotice(result: result))
        }, Unmanaged.passUnretained(self).toOpaque())
        try execute(Self.sessionSettings)
    }

    /// What every connection sets first, whatever the server's, the database's or the role's
    /// defaults (a later SET in the session still wins):
    /// - `client_encoding` UTF8: Swift strings are UTF-8 (under LATIN1 every non-ASCII character
    ///   was stored encoded twice, and seals then failed to verify);
    /// - `DateStyle` ISO, `IntervalStyle` postgres, `extra_float_digits` 3, `bytea_output` hex,
    ///   `TimeZone` UTC: the text formats `PostgresValue` decodes, every digit of a double
    ///   included (a zone whose old offsets have seconds, Asia/Kolkata's +05:53:28 of 1850,
    ///   printed timestamps `Date` could not read); the contract's days are UTC days;
    /// - `standard_conforming_strings` on: a backslash in a literal is a backslash (in the
    ///   migrations, and in the patterns of server functions, which are parsed as they run);
    /// - `search_path` pg_catalog, pg_temp: unqualified names are PostgreSQL's own functions and
    ///   operators only; a look-alike `date_trunc(text, date)` in a schema on the database's
    ///   search_path matched better than the real one and ran as the caller;
    /// - `default_transaction_isolation` read committed: the write path and the projector read
    ///   under their locks in new snapshots.
    static let sessionSettings = """
        set client_encoding = 'UTF8';
        set datestyle = 'ISO, YMD';
        set intervalstyle = 'postgres';
        set extra_float_digits = 3;
        set bytea_output = 'hex';
        set timezone = 'UTC';
        set standard_conforming_strings = on;
        set search_path = pg_catalog, pg_temp;
        set default_transaction_isolation = 'read committed'
        """

    deinit { PQfinish(handle) }

    /// Refuses a URL or key=value string that libpq cannot parse, before connecting. libpq's
    /// message quotes the offending text, which may hold the password: quoted text is left out.
    static func checkSyntax(_ url: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        if let options = PQconninfoParse(url, &message) {
            PQconninfoFree(options)
            return
        }
        let text = message.map { String(cString: $0).trimmingWhitespace() } ?? "cannot parse it"
        PQfreemem(message)
        // `matching "]"` stays readable; quoted text of two or more characters goes. A quote in
        // the URL would upset the pairing: then everything after the first quote goes.
        let shown = url.contains("\"") ? text.prefix { $0 != "\"" } + "\"...\"" : leavingOutQuoted(text) { $0.count >= 2 }
        throw PostgresError(code: .invalidConnectionString, message: "invalid database URL: \(shown)")
    }

    /// `message` with each quoted text that `drop` picks shown as `"..."`.
    static func leavingOutQuoted(_ message: String, where drop: (String) -> Bool) -> String {
        var parts = message.split(separator: "\"", omittingEmptySubsequences: false).map(String.init)
        for i in stride(from: 1, to: parts.count, by: 2) where drop(parts[i]) { parts[i] = "..." }
        return parts.joined(separator: "\"")
    }

    /// `message` without the URL's password. A password with an unescaped `/`, `@` or `?` splits
    /// the URL elsewhere than meant, and libpq then quotes a piece of it as a port or host name:
    /// a quoted text holding a piece of two or more characters is left out whole, and every piece
    /// of three or more characters elsewhere (pieces as written and percent-decoded).
    static func redactingPassword(_ message: String, url: String) -> String {
        var secrets: [String] = []
        if let scheme = url.range(of: "://") {
            let afterScheme = url[scheme.upperBound...]
            // As the user meant it: from the first ':' of the user info to the last '@'.
            if let at = afterScheme.lastIndex(of: "@"), let colon = afterScheme[..<at].firstIndex(of: ":") {
                secrets.append(String(afterScheme[afterScheme.index(after: colon)..<at]))
            }
        }
        var message = message
        if let options = PQconninfoParse(url, nil) {  // key=value strings, and URLs as libpq read them
            var option = options
            while let keyword = option.pointee.keyword {
                if String(cString: keyword) == "password", let value = option.pointee.val { secrets.append(String(cString: value)) }
                option += 1
            }
            PQconninfoFree(options)
        }
        let pieces = Set(secrets.flatMap { secret in
            [secret, secret.removingPercentEncoding ?? secret].flatMap { $0.split(whereSeparator: { "/@?#:&=".contains($0) }) }
        }.map(String.init)).filter { $0.count >= 2 }
        message = leavingOutQuoted(message) { quoted in pieces.contains(where: quoted.contains) }
        for piece in pieces.sorted(by: { $0.count > $1.count }) where piece.count >= 3 {
            message = message.replacingOccurrences(of: piece, with: "***")
        }
        return message
    }

    /// True while the connection is usable.
    public var isOpen: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Whether a transaction block is open (or failed and not yet rolled back) on the connection.
    public var isInTransaction: Bool {
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    /// The server's backend process id.
    public var backendPID: Int { Int(PQbackendPID(handle)) }

    /// The server's version as PostgreSQL numbers it (`server_version_num`: 150018 for 15.18),
    /// known since the connection started.
    public var serverVersion: Int { Int(PQserverVersion(handle)) }

    /// Seconds by which the server's clock is ahead of this machine's (negative when it is
    /// behind), read in one round trip and set against its midpoint.
    public func clockOffset() throws -> TimeInterval {
        let sent = Date().timeIntervalSince1970
        let server = try query("select extract(epoch from clock_timestamp())::float8").scalar(Double.self)
        let received = Date().timeIntervalSince1970
        return server - (sent + received) / 2
    }

    /// Whether the session's role may read every one of `relations` (`schema.name`, split at the
    /// first dot: the schema's USAGE and the relation's SELECT) and call every function named in
    /// `functions` (EXECUTE on each of its overloads), asked of the catalogue in one round trip:
    /// a refusal met while reading would end a caller's transaction. A name that does not exist
    /// is false.
    public func mayRead(_ relations: [String], calling functions: [String] = []) throws -> Bool {
        func arrays(_ names: [String]) -> ([String], [String]) {
            let parts = names.map { $0.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).map(String.init) }
            return (parts.map { $0[0] }, parts.map { $0.count > 1 ? $0[1] : "" })
        }
        let (relationSchemas, relationNames) = arrays(relations)
        let (functionSchemas, functionNames) = arrays(functions)
        return try query("""
            select coalesce((select bool_and(exists (
                                 select from pg_class c join pg_namespace n on n.oid = c.relnamespace
                                  where n.nspname = r.schema and c.relname = r.name
                                    and has_schema_privilege(n.oid, 'usage') and has_table_privilege(c.oid, 'select')))
                               from unnest($1::text[], $2::text[]) as r(schema, name)), true)
               and coalesce((select bool_and(exists (
                                 select from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                                  where n.nspname = f.schema and p.proname = f.name)
                             and not exists (
                                 select from pg_proc p join pg_namespace n on n.oid = p.pronamespace
                                  where n.nspname = f.schema and p.proname = f.name
                                    and not (has_schema_privilege(n.oid, 'usage') and has_function_privilege(p.oid, 'execute'))))
                               from unnest($3::text[], $4::text[]) as f(schema, name)), true)
            """, [relationSchemas, relationNames, functionSchemas, functionNames]).scalar()
    }

    // MARK: Queries

    /// Runs one statement with parameters `$1...$n`, sent separately from the SQL text.
    @discardableResult
    public func query(_ sql: String, _ parameters: [(any PostgresEncodable)?] = []) throws -> QueryResult {
        let texts = try Self.texts(sql, parameters)
        return try withCStrings(texts) { pointers in
            try run("query failed", blocking: { PQexecParams(handle, sql, Int32(pointers.count), nil, pointers, nil, nil, 0) },
                    sending: { PQsendQueryParams(handle, sql, Int32(pointers.count), nil, pointers, nil, nil, 0) })
        }
    }

    /// Runs one statement like `query`, as a server-side prepared statement: prepared the first
    /// time this connection runs `sql`, then only executed, so the server no longer parses and
    /// plans it on every call. For the statements a connection runs many times (appends). A
    /// statement the server no longer knows (after `DISCARD ALL`) is prepared again: at once
    /// outside a transaction; inside one, whose failed statement aborted it, on the next call.
    @discardableResult
    public func preparedQuery(_ sql: String, _ parameters: [(any PostgresEncodable)?] = []) throws -> QueryResult {
        let texts = try Self.texts(sql, parameters)
        do {
            return try executePrepared(sql, texts)
        } catch let error as PostgresError where error.code.rawValue == "26000" {  // invalid_sql_statement_name
            preparedNames[sql] = nil
            guard PQtransactionStatus(handle) == PQTRANS_IDLE else { throw error }
            return try executePrepared(sql, texts)
        }
    }

    private func executePrepared(_ sql: String, _ texts: [String?]) throws -> QueryResult {
        let name: String
        if let known = preparedNames[sql] {
            name = known
        } else {
            preparedCount += 1
            name = "permaudit_\(preparedCount)"
            _ = try run("prepare failed", blocking: { PQprepare(handle, name, sql, Int32(texts.count), nil) },
                        sending: { PQsendPrepare(handle, name, sql, Int32(texts.count), nil) })
            preparedNames[sql] = name
        }
        return try withCStrings(texts) { pointers in
            try run("query failed", blocking: { PQexecPrepared(handle, name, Int32(pointers.count), pointers, nil, nil, 0) },
                    sending: { PQsendQueryPrepared(handle, name, Int32(pointers.count), pointers, nil, nil, 0) })
        }
    }

    /// Sends one statement without waiting for its result, so the caller can work while the
    /// server does; collect the result with `receiveResult()` before sending anything else.
    public func sendQuery(_ sql: String, _ parameters: [(any PostgresEncodable)?] = []) throws {
        let texts = try Self.texts(sql, parameters)
        let sent = withCStrings(texts) { pointers in
            PQsendQueryParams(handle, sql, Int32(pointers.count), nil, pointers, nil, nil, 0)
        }
        // On a healthy connection libpq refuses what the caller got wrong (a second statement
        // before the first one's result, too many parameters), not the server.
        guard sent == 1 else { throw PostgresError.connection(handle, "send failed", code: isOpen ? .misuse : .connectionFailure) }
    }

    /// Waits for the result of the statement sent with `sendQuery`.
    @discardableResult
    public func receiveResult() throws -> QueryResult {
        let first = PQgetResult(handle)
        if first == nil, isOpen { throw PostgresError(code: .misuse, message: "receiveResult: no statement was sent (sendQuery first)") }
        drainResults()
        return try check(first, context: "query failed")
    }

    /// Asks the server to cancel the statement in progress on this connection (a request on a
    /// connection of its own, as libpq sends it); returns whether it was sent. The statement then
    /// fails with SQLSTATE 57014, which `receiveResult()` reports; nothing happens if it ended.
    @discardableResult
    public func cancel() -> Bool {
        guard let request = PQgetCancel(handle) else { return false }
        defer { PQfreeCancel(request) }
        var message = [CChar](repeating: 0, count: 256)
        return PQcancel(request, &message, Int32(message.count)) == 1
    }

    /// Runs one or more statements without parameters (for DDL and migration files).
    public func execute(_ sql: String) throws {
        try Self.refuseNUL(sql, in: "the SQL text")
        _ = try run("statement failed", blocking: { PQexec(handle, sql) }, sending: { PQsendQuery(handle, sql) })
    }

    /// One statement (or several, for `execute`) and its result, as PQexec gives it: the last
    /// result, or the first error. Without `responseTimeout`, libpq's blocking call; with it, the
    /// same sent without blocking and waited for until the deadline.
    private func run(_ context: String, blocking: () -> OpaquePointer?, sending: () -> Int32) throws -> QueryResult {
        guard let timeout = responseTimeout else { return try check(blocking(), context: context) }
        let deadline = Date().addingTimeInterval(timeout)
        guard PQsetnonblocking(handle, 1) == 0 else { throw PostgresError.connection(handle, context) }
        defer { _ = PQsetnonblocking(handle, 0) }
        guard sending() == 1 else { throw PostgresError.connection(handle, "send failed", code: isOpen ? .misuse : .connectionFailure) }
        while true {  // the statement out (a large one does not fit the socket's buffer at once)
            let flushed = PQflush(handle)
            if flushed == 0 { break }
            guard flushed == 1 else { throw PostgresError.connection(handle, context) }
            try waitForSocket(Int16(POLLOUT | POLLIN), until: deadline, timeout: timeout)
            guard PQconsumeInput(handle) == 1 else { throw PostgresError.connection(handle, context) }
        }
        var kept: OpaquePointer?
        while true {
            while PQisBusy(handle) == 1 {
                try waitForSocket(Int16(POLLIN), until: deadline, timeout: timeout)
                guard PQconsumeInput(handle) == 1 else { break }  // lost: PQgetResult reports it
            }
            guard let next = PQgetResult(handle) else { break }
            if let previous = kept, PQresultStatus(previous) == PGRES_FATAL_ERROR {
                PQclear(next)  // after an error only what ends the statement follows
            } else {
                if let previous = kept { PQclear(previous) }
                kept = next
            }
        }
        return try check(kept, context: context)
    }

    /// Waits for the socket until `deadline`; past it, shuts the connection down (libpq then sees
    /// it closed) and throws 08006.
    private func waitForSocket(_ events: Int16, until deadline: Date, timeout: Double) throws {
        let socket = PQsocket(handle)
        while true {
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 {
                if socket >= 0 { shutdown(socket, Int32(SHUT_RDWR)) }
                _ = PQconsumeInput(handle)
                throw PostgresError(code: .connectionFailure,
                                    message: "the server did not answer within \(timeout) s; the connection is closed")
            }
            var descriptor = pollfd(fd: socket, events: events, revents: 0)
            let ready = poll(&descriptor, 1, Int32(max(1, min(remaining, 1) * 1000)))
            if ready > 0 { return }
            if ready < 0 && errno != EINTR { throw PostgresError.connection(handle, "poll failed") }
        }
    }

    /// The parameters in text format, once the SQL text and each of them is known to hold no NUL.
    private static func texts(_ sql: String, _ parameters: [(any PostgresEncodable)?]) throws -> [String?] {
        try refuseNUL(sql, in: "the SQL text")
        return try parameters.enumerated().map { index, parameter in
            guard let text = try parameter?.checkedPostgresText() else { return nil }
            try refuseNUL(text, in: "parameter $\(index + 1)")
            return text
        }
    }

    /// Throws when `text` holds a NUL character: libpq takes C strings, which would end there and
    /// send the rest of the text nowhere (a subject "a\0b" would be looked up as "a").
    static func refuseNUL(_ text: String, in place: String) throws {
        var text = text
        let found = text.withUTF8 { bytes in bytes.isEmpty ? false : memchr(bytes.baseAddress!, 0, bytes.count) != nil }
        if found {
            throw PostgresError(code: .characterNotInRepertoire, message: "\(place) contains a NUL character (U+0000), which PostgreSQL text cannot hold; nothing was sent")
        }
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws. A
    /// statement that failed inside `body` aborts the transaction even when `body` catches its
    /// error (PostgreSQL's rule; a COMMIT then rolls back): `transaction` then rolls back and
    /// throws `25P02` rather than return as if committed. Put a statement that may fail, and
    /// whose failure `body` handles, in a `savepoint`.
    @discardableResult
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        // BEGIN inside a transaction only warns, and the COMMIT below would end the caller's.
        guard !isInTransaction else {
            throw PostgresError(code: .activeSQLTransaction, message: "a transaction is already in progress on this connection (use savepoint)")
        }
        try execute("BEGIN")
        do {
            let value = try body()
            guard PQtransactionStatus(handle) != PQTRANS_INERROR else {
                throw PostgresError(code: .inFailedSQLTransaction,
                                    message: "a statement in the transaction failed and its error was caught: rolled back, nothing was committed (use savepoint around a statement that may fail)")
            }
            try execute("COMMIT")
            return value
        } catch {
            if isOpen { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// Runs `body` inside a savepoint of the current transaction: released when it returns,
    /// rolled back to when it throws (the transaction itself stays usable). The name is quoted
    /// as an identifier.
    @discardableResult
    public func savepoint<T>(_ name: String = "permaudit_savepoint", _ body: () throws -> T) throws -> T {
        let name = Self.quoteIdentifier(name)
        try execute("SAVEPOINT \(name)")
        do {
            let value = try body()
            try execute("RELEASE SAVEPOINT \(name)")
            return value
        } catch {
            // Rolled back to, then released: a savepoint left behind would nest the next one.
            if isOpen { try? execute("ROLLBACK TO SAVEPOINT \(name); RELEASE SAVEPOINT \(name)") }
            throw error
        }
    }

    // MARK: COPY

    /// Runs a `COPY ... FROM STDIN` statement; `body` writes the data through the writer.
    /// Returns the number of rows copied.
    @discardableResult
    public func copyIn(_ sql: String, _ body: (CopyWriter) throws -> Void) throws -> Int {
        try Self.refuseNUL(sql, in: "the SQL text")
        let start = PQexec(handle, sql)
        guard let start, PQresultStatus(start) == PGRES_COPY_IN else {
            _ = try check(start, context: "COPY failed")
            throw PostgresError(code: .misuse, message: "copyIn needs a COPY ... FROM STDIN statement; the statement ran and returned no COPY")
        }
        PQclear(start)
        let writer = CopyWriter(connection: self, handle: handle)
        defer { writer.isOpen = false }
        do {
            try body(writer)
            try writer.flush()
        } catch {
            _ = PQputCopyEnd(handle, "aborted by client")
            drainResults()
            throw error
        }
        guard PQputCopyEnd(handle, nil) == 1 else { throw PostgresError.connection(handle, "COPY end failed") }
        let result = try check(PQgetResult(handle), context: "COPY failed")
        drainResults()
        return result.affectedRows
    }

    /// Runs a `COPY ... TO STDOUT` statement, handing each row's bytes to `row`.
    /// Returns the number of rows.
    @discardableResult
    public func copyOut(_ sql: String, _ row: (UnsafeRawBufferPointer) throws -> Void) throws -> Int {
        try Self.refuseNUL(sql, in: "the SQL text")
        let start = PQexec(handle, sql)
        guard let start, PQresultStatus(start) == PGRES_COPY_OUT else {
            _ = try check(start, context: "COPY failed")
            throw PostgresError(code: .misuse, message: "copyOut needs a COPY ... TO STDOUT statement; the statement ran and returned no COPY")
        }
        PQclear(start)
        var rows = 0
        var failure: Error?
        while true {
            var buffer: UnsafeMutablePointer<CChar>?
            let length = PQgetCopyData(handle, &buffer, 0)
            if length == -1 { break }
            if length == -2 { throw PostgresError.connection(handle, "COPY read failed") }
            if let buffer {
                if failure == nil {
                    do { try row(UnsafeRawBufferPointer(start: buffer, count: Int(length))) } catch { failure = error }
                }
                PQfreemem(buffer)
                rows += 1
            }
        }
        _ = try check(PQgetResult(handle), context: "COPY failed")
        drainResults()
        if let failure { throw failure }
        return rows
    }

    // MARK: LISTEN / NOTIFY

    /// Subscribes this connection to a channel (`LISTEN`). The name is quoted as an identifier.
    public func listen(_ channel: String) throws {
        try execute("LISTEN \(Connection.quoteIdentifier(channel))")
    }

    /// Sends a notification (`pg_notify`) on a channel.
    public func notify(_ channel: String, payload: String = "") throws {
        try query("select pg_notify($1, $2)", [channel, payload])
    }

    /// Waits up to `timeout` seconds for a notification on a channel this connection listens to.
    /// Returns nil on time-out.
    public func waitForNotification(timeout: Double) throws -> Notification? {
        guard !timeout.isNaN else { throw PostgresError(code: .misuse, message: "waitForNotification: the time-out is not a number") }
        if let pending = nextNotification() { return pending }
        let socket = PQsocket(handle)
        guard socket >= 0 else { throw PostgresError.connection(handle, "no socket") }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return nil }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(remaining, 1) * 1000))
            if ready < 0 && errno != EINTR { throw PostgresError.connection(handle, "poll failed") }
            if ready > 0 {
                guard PQconsumeInput(handle) == 1 else { throw PostgresError.connection(handle, "connection lost") }
                if let notification = nextNotification() { return notification }
            }
        }
    }

    /// A notification received through `LISTEN`.
    public struct Notification: Sendable {
        public var channel: String
        public var payload: String
        public var senderPID: Int
    }

    private func nextNotification() -> Notification? {
        guard let raw = PQnotifies(handle) else { return nil }
        defer { PQfreemem(raw) }
        return Notification(
            channel: String(cString: raw.pointee.relname),
            payload: String(cString: raw.pointee.extra),
            senderPID: Int(raw.pointee.be_pid)
        )
    }

    // MARK: Helpers

    /// Quotes an identifier for SQL text (for names that cannot be parameters, like LISTEN channels).
    public static func quoteIdentifier(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    private func check(_ result: OpaquePointer?, context: String) throws -> QueryResult {
        guard let result else { throw PostgresError.connection(handle, context) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY, PGRES_COPY_IN, PGRES_COPY_OUT:
            return QueryResult(owning: result)
        default:
            let error = PostgresError(result: result, fallback: context)
            PQclear(result)
            if PQstatus(handle) != CONNECTION_OK {
                var lost = PostgresError.connection(handle, context)
                if error.code != .connectionFailure { lost = error }
                throw lost
            }
            throw error
        }
    }

    private func drainResults() {
        while let extra = PQgetResult(handle) { PQclear(extra) }
    }
}

/// Writes data to a `COPY ... FROM STDIN` in progress, buffering small writes.
public final class CopyWriter {
    /// Kept alive by the writer: its handle must outlive any write.
    private let connection: Connection
    private let handle: OpaquePointer
    private var buffer: [UInt8] = []
    private let threshold = 256 * 1024
    /// False once `copyIn` has ended the COPY: a writer kept beyond its body is refused.
    var isOpen = true

    init(connection: Connection, handle: OpaquePointer) {
        self.connection = connection
        self.handle = handle
        buffer.reserveCapacity(threshold + 4096)
    }

    public func write(_ bytes: some Sequence<UInt8>) throws {
        try checkOpen()
        buffer.append(contentsOf: bytes)
        if buffer.count >= threshold { try flush() }
    }

    public func write(_ text: String) throws { try write(text.utf8) }

    private func checkOpen() throws {
        guard isOpen else { throw PostgresError(code: .objectNotInPrerequisiteState, message: "the COPY has ended: a CopyWriter is valid inside copyIn's body only") }
    }

    /// Writes `text` as one field of COPY's text format: backslash, tab, line feed and carriage
    /// return escaped (the separators and line ends are the caller's).
    public func writeTextField(_ text: String) throws {
        try checkOpen()
        var text = text
        var out = buffer  // (a local copy: no exclusivity check per byte)
        buffer = []
        text.withUTF8 { field in
            var run = 0
            for i in 0..<field.count {
                let escaped: UInt8
                switch field[i] {
                case 0x5C: escaped = 0x5C  // \ -> \\
                case 0x09: escaped = 0x74  // tab -> \t
                case 0x0A: escaped = 0x6E  // line feed -> \n
                case 0x0D: escaped = 0x72  // carriage return -> \r
                default: continue
                }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: field[run..<i]))
                out.append(0x5C)
                out.append(escaped)
                run = i + 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: field[run...]))
        }
        buffer = out
        if buffer.count >= threshold { try flush() }
    }

    func flush() throws {
        guard !buffer.isEmpty else { return }
        let status = buffer.withUnsafeBufferPointer { pointer in
            pointer.withMemoryRebound(to: CChar.self) { PQputCopyData(handle, $0.baseAddress, Int32($0.count)) }
        }
        guard status == 1 else { throw PostgresError.connection(handle, "COPY write failed") }
        buffer.removeAll(keepingCapacity: true)
    }
}

/// Calls `body` with a C array of NUL-terminated strings (nil entries stay NULL).
private func withCStrings<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) throws -> R) rethrows -> R {
    var owned: [UnsafeMutablePointer<CChar>?] = strings.map { $0.map { strdup($0) } }
    defer { for pointer in owned { free(pointer) } }
    return try owned.withUnsafeMutableBufferPointer { buffer in
        try body(buffer.map { UnsafePointer($0) })
    }
}
