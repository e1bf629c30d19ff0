import Foundation
import Postgres

/// The database is unreachable (or went away during a call): answer 503 and retry later.
struct DatabaseUnavailable: Error, CustomStringConvertible {
    var description: String
}

/// A bounded pool of database connections, opened on demand. When a connection cannot be opened
/// the pool stays "down" for `retryInterval` seconds, refusing at once, so that a missing
/// database costs one connection attempt per interval rather than one per request.
final class ConnectionPool: @unchecked Sendable {
    // @unchecked Sendable: all state is guarded by `condition`; a checked-out `Connection` is used
    // by the one thread that holds it (libpq's rule) until it is checked in.
    let url: String
    let size: Int
    let retryInterval: Double
    private let condition = NSCondition()
    private var idle: [Connection] = []
    private var open = 0
    private var downUntil: Date?
    private var offset: TimeInterval = 0

    /// Seconds the server's clock is ahead of this machine's, as read on the last connection
    /// opened (0 before the first).
    var clockOffset: TimeInterval {
        condition.lock()
        defer { condition.unlock() }
        return offset
    }

    init(url: String, size: Int, retryInterval: Double = 1) {
        // A hung server (stopped, or a network that drops packets) must not hold a thread: a new
        // connection waits 3 s at most (libpq's connect_timeout, unless the URL or the environment
        // sets one), and every statement `withConnection`'s time-out.
        setenv("PGCONNECT_TIMEOUT", "3", 0)
        self.url = url
        self.size = max(size, 1)
        self.retryInterval = retryInterval
    }

    /// Connections currently checked out.
    var inUse: Int {
        condition.lock()
        defer { condition.unlock() }
        return open - idle.count
    }

    /// Runs `body` with a connection of its own. A connection lost under `body` (a server restart
    /// ends every connection at once) takes the idle ones with it, and `body` runs once more on a
    /// new connection: what it did rolled back with the lost one. Failures to connect, a second
    /// lost connection or a server going away throw `DatabaseUnavailable`, and so does a server
    /// that does not answer a statement within `timeout` seconds (the connection is closed).
    func withConnection<T>(wait: Double = 5, timeout: Double = 10, _ body: (Connection) throws -> T) throws -> T {
        var retried = false
        while true {
            let connection = try checkOut(wait: wait)
            connection.responseTimeout = timeout
            do {
                let result = try body(connection)
                checkIn(connection)
                return result
            } catch {
                checkIn(connection)
                if !connection.isOpen && !retried {
                    close()
                    retried = true
                    continue
                }
                if !connection.isOpen || Self.meansUnavailable(error) { throw DatabaseUnavailable(description: "\(error)") }
                throw error
            }
        }
    }

    /// Server shutdown, connection loss, or too many connections: worth a retry later.
    static func meansUnavailable(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        let code = error.code.rawValue
        return code.hasPrefix("08") || code.hasPrefix("57P") || code == "53300"
    }

    private func checkOut(wait: Double) throws -> Connection {
        condition.lock()
        let deadline = Date().addingTimeInterval(wait)
        while true {
            if let downUntil, downUntil > Date() {
                condition.unlock()
                throw DatabaseUnavailable(description: "the database is unreachable")
            }
            if let connection = idle.popLast() {
                condition.unlock()
                return connection
            }
            if open < size { break }
            if !condition.wait(until: deadline) {
                condition.unlock()
                throw DatabaseUnavailable(description: "no database connection free within \(wait) s")
            }
        }
        open += 1
        condition.unlock()
        do {
            let connection = try Connection(url: url)
            connection.responseTimeout = 3
            let clockOffset = try connection.clockOffset()
            condition.lock()
            downUntil = nil
            offset = clockOffset
            condition.unlock()
            return connection
        } catch {
            condition.lock()
            open -= 1
            downUntil = Date().addingTimeInterval(retryInterval)
            condition.signal()
            condition.unlock()
            throw DatabaseUnavailable(description: "\(error)")
        }
    }

    private func checkIn(_ connection: Connection) {
        condition.lock()
        if connection.isOpen { idle.append(connection) } else { open -= 1 }
        condition.signal()
        condition.unlock()
    }

    /// Closes the idle connections (those checked out close when dropped).
    func close() {
        condition.lock()
        open -= idle.count
        idle.removeAll()
        condition.unlock()
    }
}
