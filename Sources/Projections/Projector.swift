import EventLog
import Foundation
import Postgres

/// Turns the log into the analytics projections, incrementally and in committed order.
///
/// Each batch is one transaction running `projection.apply_batch`: the projection writes and the
/// checkpoint commit together, so a crash at any instant loses or double-counts nothing. An empty
/// projection is first built in one pass over the log, also one transaction (with a second
/// connection for part of it when the projector has one: `Projector(url:)`).
///
///     let projector = try Projector(url: try Database.resolveURL(nil))
///     try projector.acquire()          // only one projector at a time
///     let done = try projector.catchUp()
public final class Projector {
    public let connection: Connection
    /// Events per batch unless told otherwise: large enough that the per-batch work (one sort
    /// per grouping, one visit per install and attempt) is shared by many events, small enough
    /// that the server's memory per batch stays bounded (see BENCHMARKS.md).
    public static let defaultBatchSize = 100_000
    public var batchSize = Projector.defaultBatchSize
    /// The NOTIFY channel `audit.append_events` signals on.
    public static let channel = "permaudit_events"
    static let lockKey = "permaudit.projector"

    /// Opens a second connection for the one-pass build of an empty projection (set from
    /// `secondConnectionURL`). The build then computes the tables of installs and intake on it, in a
    /// transaction of its own (`projection.stage_install_tables`), while `connection` builds the
    /// attempts and the counts, and copies them in before it commits: the server's second core
    /// does part of the work (migration 026, BENCHMARKS.md). Nil, or when it throws: the build
    /// runs on `connection` alone, and `log` says why.
    public var openBuildHelper: (() throws -> Connection)?
    /// Operational messages (never payloads or subjects).
    public var log: (String) -> Void = { _ in }

    /// A projector on `connection`; with `secondConnectionURL` (the same database), it opens a
    /// second connection there for a one-pass build.
    public init(connection: Connection, secondConnectionURL: String? = nil) {
        self.connection = connection
        if let secondConnectionURL { openBuildHelper = { try Connection(url: secondConnectionURL) } }
    }

    /// A projector connected to `url`, which opens a second connection there for a one-pass build.
    public convenience init(url: String) throws {
        self.init(connection: try Connection(url: url), secondConnectionURL: url)
    }

    public struct Progress: Sendable, Equatable {
        public var events = 0
        public var attempts = 0
        public var batches = 0
        public var checkpoint = EventLog.Checkpoint.start
        public init(events: Int = 0, attempts: Int = 0, batches: Int = 0, checkpoint: EventLog.Checkpoint = .start) {
            self.events = events
            self.attempts = attempts
            self.batches = batches
            self.checkpoint = checkpoint
        }
    }

    public struct Status: Sendable {
        public var checkpoint: EventLog.Checkpoint
        public var eventsProjected: Int64
        public var updatedAt: Date
        public var eventsBehind: Int64
        /// Of `eventsBehind`, those that committed after a transaction still running began: no
        /// reader in committed order takes them before that transaction ends.
        public var eventsWaiting: Int64
        /// Age in seconds of the oldest event not projected yet (nil when caught up).
        public var oldestUnprojectedAge: Double?
    }

    /// Takes the single-projector lock (a session-level advisory lock). Throws
    /// `ProjectorError.busy` naming the process that holds it, unless `wait` is set.
    public func acquire(wait: Bool = false) throws {
        // A projector killed during a batch leaves its server process running the batch, and
        // holding this lock, until it finds the client gone: have it look every second
        // (PostgreSQL 14 and later; older servers do not know the setting and look when they
        // next write to the client).
        if connection.serverVersion >= 140000 {
            try connection.execute("set client_connection_check_interval = 1000")
        }
        if wait {
            try connection.query("select pg_advisory_lock(hashtext($1))", [Self.lockKey])
            return
        }
        let got: Bool = try connection.query("select pg_try_advisory_lock(hashtext($1))", [Self.lockKey]).scalar()
        if !got {
            let holder = try connection.query("""
                select l.pid from pg_locks l
                 where l.locktype = 'advisory' and l.objid = hashtext($1)::oid and l.granted
                """, [Self.lockKey])
            throw ProjectorError.busy(pid: holder.isEmpty ? nil : try holder.value(0, 0, as: Int.self))
        }
    }

    /// Releases the single-projector lock.
    public func release() throws {
        try connection.query("select pg_advisory_unlock(hashtext($1))", [Self.lockKey])
    }

    /// One batch in its own transaction; returns what it did (zero events when caught up).
    public func step() throws -> Progress {
        try connection.transaction { try applyBatch() }
    }

    /// Builds an empty projection in one pass over the log (`projection.build_from_log`) before
    /// the batches: a new deployment, a rebuild, or a migration that reset the projection. Off,
    /// every event goes through batches of `batchSize`.
    public var buildsEmptyProjectionInOnePass = true

    /// Whether a catch-up of this projector found the projection built (its checkpoint past the
    /// start). Later catch-ups (a follower's every wake-up) then skip the one-pass check; only a
    /// reset by someone else (a migration) could empty it again, and batches handle that too.
    private var foundBuilt = false

    /// Batches until the log's committed end (after the one-pass build of an empty projection);
    /// `shouldStop` is checked between batches.
    @discardableResult
    public func catchUp(shouldStop: () -> Bool = { false }, onBatch: (Progress) -> Void = { _ in }) throws -> Progress {
        var built = Progress()
        if buildsEmptyProjectionInOnePass && !foundBuilt {
            // In an explicit transaction: a client that dies during the build never commits it.
            built = try connection.transaction { try buildFromLog() }
            foundBuilt = built.checkpoint != .start
        }
        return try drain(from: built, shouldStop: shouldStop, onBatch: onBatch) { try step() }
    }

    /// Recomputes every projection from the start of the log in one transaction: readers keep
    /// seeing the previous numbers until it commits, then see the new ones at once. A running
    /// projector waits on the checkpoint row meanwhile and continues from the rebuilt state.
    @discardableResult
    public func rebuild(onBatch: (Progress) -> Void = { _ in }) throws -> Progress {
        try connection.transaction {
            try connection.query("select projection.reset()")
            let built = buildsEmptyProjectionInOnePass ? try buildFromLog() : Progress()
            let size = try rebuildBatchSize()
            return try drain(from: built, shouldStop: { false }, onBatch: onBatch) { try applyBatch(size: size) }
        }
    }

    /// At most this many batches in the one transaction of a rebuild: each batch's scratch tables
    /// are new relations whose locks the transaction holds until it commits, and PostgreSQL's lock
    /// table (`max_locks_per_transaction` = 64 per connection by default) ran out after about
    /// 1,000 batches ("out of shared memory").
    static let maxBatchesPerRebuild = 500

    /// `batchSize`, or larger where the events still to project would take more than
    /// `maxBatchesPerRebuild` batches of it (said through `log`).
    private func rebuildBatchSize() throws -> Int {
        let pending: Int = try connection.query("""
            select count(*)::bigint from audit.events e, projection.checkpoint c
             where c.name = 'analytics' and (e.transaction_id, e.position) > (c.transaction_id, c.position)
            """).scalar()
        let size = max(batchSize, (pending + Self.maxBatchesPerRebuild - 1) / Self.maxBatchesPerRebuild)
        if size > batchSize {
            log("batches of \(size) events instead of \(batchSize): a rebuild runs in one transaction, which holds every batch's locks until it commits, so it takes at most \(Self.maxBatchesPerRebuild) batches")
        }
        return size
    }

    /// Runs `batch` until it finds no events (or `shouldStop`), adding up the progress from
    /// `start` (what the one-pass build did).
    private func drain(from start: Progress, shouldStop: () -> Bool, onBatch: (Progress) -> Void,
                       _ batch: () throws -> Progress) throws -> Progress {
        var total = start
        if start.events > 0 { onBatch(start) }
        while !shouldStop() {
            let done = try batch()
            total.checkpoint = done.checkpoint
            if done.events == 0 { break }
            total.events += done.events
            total.attempts += done.attempts
            total.batches += 1
            onBatch(total)
        }
        return total
    }

    /// For `recheckWindow` seconds after a wake-up, and while its catch-ups find events, `follow`
    /// looks again every `recheckInterval` seconds: an append sends no notification within 50 ms
    /// of one that did (`audit.notify_appended`, 039), so one wake-up can stand for appends that
    /// commit after it.
    static let recheckInterval = 0.1
    static let recheckWindow = 1.0

    /// Keeps up with the log: catches up, then waits for `NOTIFY permaudit_events` (or the
    /// polling interval) and catches up again, until `shouldStop` returns true. For a second after
    /// a wake-up, and for as long as it finds events, it looks again every 100 ms. A batch in
    /// progress when a stop is requested is finished (committed) first.
    public func follow(pollInterval: Double = 5, shouldStop: () -> Bool, onBatch: (Progress) -> Void = { _ in },
                       afterCatchUp: () throws -> Void = {}) throws {
        try connection.listen(Self.channel)
        var lastWakeUp = Date.distantPast
        while !shouldStop() {
            let found = try catchUp(shouldStop: shouldStop, onBatch: onBatch).events > 0
            try afterCatchUp()
            let recheck = found || Date().timeIntervalSince(lastWakeUp) < Self.recheckWindow
            let interval = recheck ? min(Self.recheckInterval, pollInterval) : pollInterval
            var waited = 0.0
            while !shouldStop() && waited < interval {
                let timeout = min(1, interval - waited)
                if try connection.waitForNotification(timeout: timeout) != nil {
                    lastWakeUp = Date()
                    break
                }
                waited += timeout
            }
        }
    }

    public func status() throws -> Status {
        let row = try connection.query("""
            select c.transaction_id::text, c.position, c.events_projected, c.updated_at,
                   b.behind, b.waiting,
                   (select extract(epoch from now() - min(e.recorded_at))::float8 from audit.events e
                     where (e.transaction_id, e.position) > (c.transaction_id, c.position))
              from projection.checkpoint c
             cross join lateral (select count(*) as behind,
                                        count(*) filter (where e.transaction_id >= pg_snapshot_xmin(pg_current_snapshot())) as waiting
                                   from audit.events e where (e.transaction_id, e.position) > (c.transaction_id, c.position)) as b
             where c.name = 'analytics'
            """).decode((UInt64, Int64, Int64, Date, Int64, Int64, Double?).self)
        guard let first = row.first else { throw ProjectorError.notMigrated }
        return Status(checkpoint: EventLog.Checkpoint(transactionId: first.0, position: first.1), eventsProjected: first.2,
                      updatedAt: first.3, eventsBehind: first.4, eventsWaiting: first.5, oldestUnprojectedAge: first.6)
    }

    private func applyBatch(size: Int? = nil) throws -> Progress {
        try progress(of: "select events, attempts, transaction_id::text, position from projection.apply_batch($1)", [size ?? batchSize])
    }

    /// The one-pass build; it projects nothing unless the projection is empty.
    private func buildFromLog() throws -> Progress {
        // On one connection: without a second one (none configured, or none to be had, e.g. a
        // connection limit), and when the projection is built (build_from_log returns its checkpoint).
        // A horizon locks the empty checkpoint row until this transaction ends.
        let buildOnOneConnection = {
            try self.progress(of: "select events, attempts, transaction_id::text, position from projection.build_from_log()")
        }
        guard let openBuildHelper,
              let horizon = try connection.query("select projection.build_horizon()::text").scalar(String?.self) else {
            return try buildOnOneConnection()
        }
        let helper: Connection
        do {
            helper = try openBuildHelper()
        } catch {
            log("the one-pass build runs on one connection: a second could not be opened (\(error))")
            return try buildOnOneConnection()
        }
        try helper.sendQuery("select projection.stage_install_tables($1::xid8)", [horizon])
        let attempts: Int
        do {
            attempts = try connection.query("select projection.build_attempts($1::xid8)", [horizon]).scalar(Int.self)
        } catch {
            helper.cancel()  // else it runs on, and keeps the staging tables locked until it ends
            throw error
        }
        try helper.receiveResult()  // committed: the staged rows are visible to this transaction's next statement
        return try progress(of: "select events, $2::bigint, transaction_id::text, position from projection.finish_build($1::xid8)",
                            [horizon, attempts])
    }

    private func progress(of sql: String, _ parameters: [(any PostgresEncodable)?] = []) throws -> Progress {
        let rows = try connection.query(sql, parameters).decode((Int, Int, UInt64, Int64).self)
        guard let row = rows.first else { throw ProjectorError.notMigrated }
        return Progress(events: row.0, attempts: row.1, batches: row.0 > 0 ? 1 : 0,
                        checkpoint: EventLog.Checkpoint(transactionId: row.2, position: row.3))
    }
}

public enum ProjectorError: Error, CustomStringConvertible, Sendable {
    case busy(pid: Int?)
    case notMigrated

    public var description: String {
        switch self {
        case let .busy(pid):
            return "another projector is running" + (pid.map { " (server process \($0))" } ?? "") + "; only one may work at a time"
        case .notMigrated:
            return "the projection schema is missing; run 'permaudit migrate'"
        }
    }
}
