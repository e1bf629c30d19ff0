import EventLog
import Foundation
import PermissionEvents
import Postgres

/// The outcome of one event of a request.
enum EventResult: Equatable, Sendable {
    case appended
    case duplicate
    case rejected(field: String, rule: String)
}

/// The valid events of one request (already checked by the Swift validator) with their ids, and
/// the intake groups of the events it rejected; `completion` is called once, after the commit.
struct Submission: Sendable {
    var events: [String]
    /// The events' ids, lowercased (ids are UUIDs: case does not make another id).
    var ids: Set<String>
    var rejected: [RejectedGroup: Int]
    var completion: @Sendable (Result<[EventResult], any Error>) -> Void
}

/// Group commit: requests queue their events here; each of `writers` threads takes everything
/// queued (up to `maxEvents` events), appends it in one call of `audit.append_events` in one
/// transaction with the rejected counts, and answers each request after the commit. Concurrent
/// requests thus share one transaction, one fsync and one round trip; the number of writers is
/// the number of database connections. Requests that carry the same event id never share a
/// call: inside one call the first copy of an id counts, which would judge one client's event
/// by another's (an exact copy of a stored event could come back as a conflict).
final class GroupCommitter: @unchecked Sendable {
    // @unchecked Sendable: `queue`, `stopping`, `running` and `databaseDown` are guarded by `condition`.
    private let pool: ConnectionPool
    private let maxEvents: Int
    private let metrics: Metrics
    private let log: @Sendable (String) -> Void
    private let condition = NSCondition()
    private var queue: [Submission] = []
    private var stopping = false
    private var running = 0
    private var databaseDown = false

    init(pool: ConnectionPool, maxEvents: Int, metrics: Metrics, log: @escaping @Sendable (String) -> Void) {
        self.pool = pool
        self.maxEvents = maxEvents
        self.metrics = metrics
        self.log = log
        for index in 0..<pool.size {
            let thread = Thread { [self] in work() }
            thread.name = "permaudit-writer-\(index)"
            running += 1
            thread.start()
        }
    }

    func submit(_ submission: Submission) {
        condition.lock()
        guard !stopping else {
            condition.unlock()
            submission.completion(.failure(DatabaseUnavailable(description: "the collector is shutting down")))
            return
        }
        queue.append(submission)
        condition.signal()
        condition.unlock()
    }

    /// Writes what is queued, then ends the writer threads.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running > 0 { condition.wait() }
        condition.unlock()
    }

    private func work() {
        while let group = next() {
            write(group)
        }
        condition.lock()
        running -= 1
        condition.broadcast()
        condition.unlock()
    }

    private func next() -> [Submission]? {
        condition.lock()
        defer { condition.unlock() }
        while queue.isEmpty {
            if stopping { return nil }
            condition.wait()
        }
        let taken = Self.groupSize(queue, maxEvents: maxEvents)
        let group = Array(queue.prefix(taken))
        queue.removeFirst(taken)
        return group
    }

    /// How many submissions at the head of `queue` go into one call: at least one; then while
    /// the events fit in `maxEvents` and no event id repeats one already taken.
    static func groupSize(_ queue: [Submission], maxEvents: Int) -> Int {
        var count = 0
        var ids = Set<String>()
        var taken = 0
        while taken < queue.count,
              taken == 0 || (count + queue[taken].events.count <= maxEvents && ids.isDisjoint(with: queue[taken].ids)) {
            count += queue[taken].events.count
            ids.formUnion(queue[taken].ids)
            taken += 1
        }
        return taken
    }

    /// Appends a group's events; a refused event (PA001/PA002) becomes a rejection and the rest
    /// is appended again (the pool runs the transaction once more after a lost connection:
    /// idempotent by eventId).
    private func write(_ group: [Submission]) {
        var results: [[EventResult?]] = group.map { Array(repeating: nil, count: $0.events.count) }
        var live: [(request: Int, event: Int)] = group.indices.flatMap { r in group[r].events.indices.map { (r, $0) } }
        var rejected = group.reduce(into: [RejectedGroup: Int]()) { all, submission in
            all.merge(submission.rejected, uniquingKeysWith: +)
        }
        var isolate = false
        while true {
            do {
                let appended = try pool.withConnection { db in
                    // A deadlock victim stored nothing: run the transaction again.
                    try PostgresError.retryingRollbacks {
                        try db.transaction {
                            let events = live.map { group[$0.request].events[$0.event] }
                            let stored = isolate ? try appendOneByOne(events, on: db) : try append(events, on: db)
                            var groups = rejected
                            for (event, result) in zip(events, stored) where result != .appended && result != .duplicate {
                                groups[RejectedGroup(Array(event.utf8)), default: 0] += 1
                            }
                            for (key, count) in groups { try key.record(count, on: db) }
                            return stored
                        }
                    }
                }
                for (slot, result) in zip(live, appended) { results[slot.request][slot.event] = result }
                metrics.batch(requests: group.count, events: live.count)
                for (index, submission) in group.enumerated() {
                    submission.completion(.success(results[index].map { $0 ?? .duplicate }))
                }
                databaseState(down: false)
                return
            } catch let refusal as AppendError where (refusal.index ?? live.count) < live.count {
                let slot = live.remove(at: refusal.index!)
                let (field, rule) = Self.split(refusal.reason)
                results[slot.request][slot.event] = .rejected(field: field, rule: rule)
                rejected[RejectedGroup(Array(group[slot.request].events[slot.event].utf8)), default: 0] += 1
            } catch let error as PostgresError where error.code.rawValue.hasPrefix("22") && !isolate {
                isolate = true
            } catch {
                metrics.databaseError()
                if error is DatabaseUnavailable { databaseState(down: true, error) } else { log("collector: append failed: \(Self.oneLine(error))") }
                for submission in group { submission.completion(.failure(error)) }
                return
            }
        }
    }

    /// Logs when the database becomes unavailable and when it is back: one line each, not one per
    /// refused request; under the lock, so that the lines come in the order of the changes. The
    /// collector's key check reports an outage here too.
    func databaseState(down: Bool, _ error: (any Error)? = nil) {
        condition.lock()
        defer { condition.unlock() }
        guard databaseDown != down else { return }
        databaseDown = down
        log(down ? "collector: the database is unavailable (\(error.map(Self.oneLine) ?? "")); answering 503 until it is back"
                 : "collector: the database is available again")
    }

    /// An error on one log line (libpq's messages carry line breaks and tabs).
    static func oneLine(_ error: any Error) -> String {
        "\(error)".split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }.joined(separator: " ")
    }

    /// One call of the write path.
    private func append(_ events: [String], on db: Connection) throws -> [EventResult] {
        guard !events.isEmpty else { return [] }
        return try EventLog(connection: db).append(events).map(Self.result)
    }

    /// After a value the server cannot store (SQLSTATE class 22, e.g. a number out of range):
    /// the events one at a time, each in a savepoint, rejecting those the server refuses.
    private func appendOneByOne(_ events: [String], on db: Connection) throws -> [EventResult] {
        let log = EventLog(connection: db)
        return try events.map { event in
            do {
                return try db.savepoint("collector_event") { try log.append([event]).map(Self.result)[0] }
            } catch let error as AppendError {
                let (field, rule) = Self.split(error.reason)
                return .rejected(field: field, rule: rule)
            } catch let error as PostgresError where error.code.rawValue.hasPrefix("22") {
                return .rejected(field: "event", rule: "refused by the database (SQLSTATE \(error.code.rawValue))")
            }
        }
    }

    private static func result(_ row: EventLog.AppendResult) -> EventResult {
        row.status == .appended ? .appended : .duplicate
    }

    /// 'field: rule' -> (field, rule).
    static func split(_ reason: String) -> (String, String) {
        guard let separator = reason.range(of: ": ") else { return ("event", reason) }
        return (String(reason[..<separator.lowerBound]), String(reason[separator.upperBound...]))
    }
}
