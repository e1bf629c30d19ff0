import Foundation
import Postgres

/// Stages races between transactions in tests: a call on its own connection in the background,
/// and a wait until backends of the database wait for locks.
public enum Concurrently {
    /// Runs `body` on a new connection to `url` in the background; the returned function waits
    /// for its result.
    public static func run<T: Sendable>(on url: String, _ body: @escaping @Sendable (Connection) throws -> T) -> () -> Result<T, any Error> {
        inBackground { try body(try Connection(url: url)) }
    }

    /// Runs `body` on a thread of its own; the returned function waits for its result.
    public static func inBackground<T: Sendable>(_ body: @escaping @Sendable () throws -> T) -> () -> Result<T, any Error> {
        let done = DispatchSemaphore(value: 0)
        let box = Box<T>()
        Thread.detachNewThread {
            box.value = Result { try body() }
            done.signal()
        }
        return { done.wait(); return box.value! }
    }

    /// Returns once `backends` backends of `db`'s database wait for a lock (background calls
    /// reached their lock waits); throws after 10 seconds.
    public static func waitForALockWait(_ db: Connection, backends: Int = 1) throws {
        for _ in 0..<500 {
            let waiting = try db.query("""
                select count(*)::int from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'
                """).scalar(Int.self)
            if waiting >= backends { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw NoLockWait()
    }

    public struct NoLockWait: Error, CustomStringConvertible {
        public var description: String { "not as many backends waited for a lock within 10 seconds" }
    }

    private final class Box<T>: @unchecked Sendable {
        var value: Result<T, any Error>?
    }
}
