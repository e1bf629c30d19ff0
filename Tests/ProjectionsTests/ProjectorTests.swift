import EventLog
import Foundation
import Postgres
import Projections
import TestSupport
import XCTest

struct NoSecondConnection: Error {}

final class ProjectorTests: DatabaseTestCase {
    func testViewsEqualARecomputationForRandomOrdersAndBatches() throws {
        for seed: UInt64 in [1, 2, 3] {
            let url = try TestDatabase.create()
            defer { TestDatabase.drop(url) }
            let db = try Connection(url: url)
            let log = EventLog(connection: db)
            let projector = Projector(connection: try Connection(url: url))
            projector.buildsEmptyProjectionInOnePass = false  // batches only; the rebuild below is one pass
            var random = RandomEvents(seed: seed)
            var events = random.events(attempts: 250, subjects: 40)
            events.shuffle(using: &random.generator)  // late and out of order
            var index = 0
            while index < events.count {
                let size = Int.random(in: 1...60, using: &random.generator)
                try log.append(Array(events[index..<min(index + size, events.count)]))
                index += size
                if Bool.random(using: &random.generator) {
                    projector.batchSize = Int.random(in: 1...80, using: &random.generator)
                    _ = try projector.step()
                }
            }
            projector.batchSize = Int.random(in: 5...200, using: &random.generator)
            try projector.catchUp()
            XCTAssertEqual(try ProjectionOracle.differences(db), [], "seed \(seed)")
            XCTAssertGreaterThan(try db.query("select count(*) from analytics.permission_outcomes_daily").scalar(Int.self), 5)
            XCTAssertGreaterThan(try db.query("select count(*) from analytics.experiment_arms").scalar(Int.self), 1)
            // A rebuild gives the same numbers and the same stored states, in one pass (on one
            // connection, projection.build_from_log; on two, as `project` runs it; on one when the
            // second cannot be opened) and in batches.
            let before = try TestDatabase.analyticsSnapshot(db) + Self.stateRows(db)
            projector.buildsEmptyProjectionInOnePass = true
            for helper in ["none", "second connection", "unavailable"] {
                switch helper {
                case "none": projector.openBuildHelper = nil
                case "second connection": projector.openBuildHelper = { try Connection(url: url) }
                default: projector.openBuildHelper = { throw NoSecondConnection() }
                }
                var logged: [String] = []
                projector.log = { logged.append($0) }
                XCTAssertEqual(try projector.rebuild().batches, 1, "one pass")
                XCTAssertEqual(logged, helper == "unavailable" ? ["the one-pass build runs on one connection: a second could not be opened (NoSecondConnection())"] : [])
                XCTAssertEqual(try TestDatabase.analyticsSnapshot(db) + Self.stateRows(db), before, "seed \(seed), one-pass rebuild, helper \(helper)")
                XCTAssertEqual(try ProjectionOracle.differences(db), [], "seed \(seed), one-pass rebuild, helper \(helper)")
            }
            XCTAssertEqual(try db.query("select count(*) from projection.staged_stream_clock").scalar(Int.self), 0, "staging emptied")
            projector.buildsEmptyProjectionInOnePass = false
            XCTAssertGreaterThan(try projector.rebuild().batches, 1)
            XCTAssertEqual(try TestDatabase.analyticsSnapshot(db) + Self.stateRows(db), before, "seed \(seed), rebuild in batches")
        }
    }

    /// A rebuild runs in one transaction, which keeps each batch's locks until it commits: batches
    /// of one event over 1,500 events ran out of PostgreSQL's lock table ("out of shared memory").
    func testARebuildInTinyBatchesTakesAtMostFiveHundred() throws {
        let db = try Connection(url: url)
        var random = RandomEvents(seed: 7)
        try TestDatabase.append(random.events(attempts: 500, subjects: 60), to: db)
        let events = try db.query("select count(*)::int from audit.events").scalar(Int.self)
        XCTAssertGreaterThan(events, 1_200)
        let projector = Projector(connection: try Connection(url: url))
        projector.buildsEmptyProjectionInOnePass = false
        projector.batchSize = 1
        var logged: [String] = []
        projector.log = { logged.append($0) }
        let done = try projector.rebuild()
        let size = (events + 499) / 500
        XCTAssertEqual(done.events, events)
        XCTAssertEqual(done.batches, (events + size - 1) / size)
        XCTAssertEqual(logged, ["batches of \(size) events instead of 1: a rebuild runs in one transaction, which holds every batch's locks until it commits, so it takes at most 500 batches"])
        XCTAssertEqual(try ProjectionOracle.differences(db), [])
    }

    /// Every row of the projection's state tables (those without count rows that can fall to zero).
    static func stateRows(_ db: Connection) throws -> [String] {
        var rows: [String] = []
        for table in ["attempts", "permission_state", "stream_clock", "events_daily", "intake_minutely", "intake_hourly", "checkpoint"] {
            let columns = table == "checkpoint" ? "x.transaction_id, x.position, x.events_projected" : "x.*"
            rows += try db.query("select '\(table) ' || row(\(columns))::text from projection.\(table) x order by 1").column(as: String.self)
        }
        return rows
    }

    /// Both ways to project an empty projection (one pass, batches) stop below a transaction
    /// that is still open, and project its event once after it commits (the one-pass build
    /// projects what committed before it; batches project the rest).
    func testAnEventCommittedLateIsProjectedOnceAfterItCommits() throws {
        for onePass in [true, false] {
            let url = try TestDatabase.create()
            defer { TestDatabase.drop(url) }
            let db = try Connection(url: url)
            let holder = try Connection(url: url)
            let projector = try Projector(url: url)  // a one-pass build on two connections
            projector.buildsEmptyProjectionInOnePass = onePass
            let attempt = UUID()
            try EventLog(connection: db).append([EventFixtures.event(type: "permission.prompted", subject: "early", attempt: UUID(),
                                                                     overrides: ["attributes": "{}"])])
            try holder.execute("BEGIN")
            // The prompt of an attempt is appended in a transaction that stays open...
            // (Another install's stream: appends to the same stream wait for the open transaction.)
            try EventLog(connection: holder).append([EventFixtures.event(type: "permission.prompted", subject: "held", attempt: attempt, overrides: ["attributes": "{}"])])
            // ...while its answer and other events commit.
            try EventLog(connection: db).append([EventFixtures.event(type: "permission.denied", occurredAt: "2026-10-03T09:15:28Z", attempt: attempt),
                                                 EventFixtures.event(type: "permission.prompted", attempt: UUID(), overrides: ["attributes": "{}"])])
            XCTAssertEqual(try projector.catchUp().events, 1, "nothing is read past the open transaction (one pass: \(onePass))")
            try holder.execute("COMMIT")
            XCTAssertEqual(try projector.catchUp().events, 3)
            XCTAssertEqual(try projector.catchUp().events, 0)
            let row = try db.query("select sum(prompted)::int, sum(denied)::int from analytics.permission_outcomes_daily").decode((Int, Int).self)
            XCTAssertEqual(row.first?.0, 3)
            XCTAssertEqual(row.first?.1, 1)
            XCTAssertEqual(try ProjectionOracle.differences(db), [])
        }
    }

    /// Late events are judged in the log's reading order (transaction id, then position), by
    /// incremental batches and by a rebuild alike. Staged: transaction L takes its id, waits for
    /// install a's lock, and stores s@09:00 after a younger transaction Q stored s@10:00; an open
    /// transaction M between them makes the projector read L's events in one batch and Q's in the
    /// next. By position s@09:00 would be late; in reading order it is not.
    func testLateEventsFollowTheReadingOrderInBatchesAndInARebuild() throws {
        let db = try Connection(url: url)
        let log = EventLog(connection: db)
        let projector = Projector(connection: try Connection(url: url))
        projector.buildsEmptyProjectionInOnePass = false
        try log.append([EventFixtures.event(subject: "a", occurredAt: "2026-11-01T00:00:00Z"),
                        EventFixtures.event(subject: "s", occurredAt: "2026-11-01T00:00:00Z")])
        _ = try projector.catchUp()
        let z = try Connection(url: url)
        try z.execute("BEGIN")
        try EventLog(connection: z).append([EventFixtures.event(subject: "a", occurredAt: "2026-11-12T08:00:00Z")])
        let l = Concurrently.run(on: url) { connection in
            try EventLog(connection: connection).append([EventFixtures.event(subject: "n", occurredAt: "2026-11-12T08:00:00Z"),
                                                          EventFixtures.event(subject: "a", occurredAt: "2026-11-12T08:00:00Z"),
                                                          EventFixtures.event(subject: "s", occurredAt: "2026-11-12T09:00:00Z")])
        }
        try Concurrently.waitForALockWait(db)
        let m = try Connection(url: url)
        try m.execute("BEGIN")
        _ = try m.query("select pg_current_xact_id()")
        try log.append([EventFixtures.event(subject: "s", occurredAt: "2026-11-12T10:00:00Z")])  // Q
        try z.execute("COMMIT")
        _ = try l().get()
        XCTAssertEqual(try db.query("""
            select string_agg(to_char(occurred_at at time zone 'UTC', 'HH24:MI'), ' ' order by position)
              from audit.events where occurred_at >= '2026-11-12T09:00:00Z'
            """).scalar(String.self), "10:00 09:00", "Q's event took its position first")
        XCTAssertEqual(try projector.catchUp().events, 4, "below M: Z's and L's events")
        try m.execute("COMMIT")
        XCTAssertEqual(try projector.catchUp().events, 1, "Q's event")
        let lateEvents = "select coalesce(sum(late_events), 0)::int from analytics.events_daily"
        XCTAssertEqual(try db.query(lateEvents).scalar(Int.self), 0)
        XCTAssertEqual(try ProjectionOracle.differences(db), [])
        let incremental = try TestDatabase.analyticsSnapshot(db) + Self.stateRows(db)
        for onePass in [true, false] {
            projector.buildsEmptyProjectionInOnePass = onePass
            _ = try projector.rebuild()
            XCTAssertEqual(try TestDatabase.analyticsSnapshot(db) + Self.stateRows(db), incremental, "rebuild, one pass: \(onePass)")
        }
    }

    func testALateEarlierEventMovesTheAttempt() throws {
        let db = try Connection(url: url)
        let projector = Projector(connection: try Connection(url: url))
        let attempt = UUID()
        try EventLog(connection: db).append([
            EventFixtures.event(type: "permission.prompted", occurredAt: "2026-10-04T00:10:00Z", attempt: attempt, overrides: ["attributes": "{}", "osVersion": "\"14\""]),
            EventFixtures.event(type: "permission.granted", occurredAt: "2026-10-04T00:11:00Z", attempt: attempt),
        ])
        try projector.catchUp()
        XCTAssertEqual(try db.query("select day::text from analytics.permission_outcomes_daily").column(as: String.self), ["2026-10-04"])
        // An earlier event of the attempt arrives: the day, the OS major and the flow move.
        try EventLog(connection: db).append([
            EventFixtures.event(type: "prePermission.shown", occurredAt: "2026-10-03T23:59:00Z", attempt: attempt,
                                overrides: ["osVersion": "\"13\"", "flow": "\"avatar\""]),
            EventFixtures.event(type: "permission.denied", occurredAt: "2026-10-04T00:10:30Z", attempt: attempt),
        ])
        try projector.catchUp()
        let rows = try db.query("select day::text, os_major, flow, prompted, granted from analytics.permission_outcomes_daily").decode((String, Int, String, Int, Int).self)
        XCTAssertEqual(rows.count, 1)
        XCTAssertEqual(rows.first?.0, "2026-10-03")
        XCTAssertEqual(rows.first?.1, 13)
        XCTAssertEqual(rows.first?.2, "avatar")
        XCTAssertEqual(rows.first?.4, 1, "granted at 00:11 is still the last answer")
        XCTAssertEqual(try db.query("select arm from analytics.priming_arms").column(as: String.self), ["primed"])
        XCTAssertEqual(try ProjectionOracle.differences(db), [])
    }

    /// "Denial rate at the dialog = denied / prompted" (contract section 4), computed from the
    /// arm views' counts as section 5 says any analyst does: a request the OS denied without a
    /// dialog (Android "don't ask again") is not a denial at the dialog.
    func testArmDenialsAreDenialsAtTheDialog() throws {
        let db = try Connection(url: url)
        let (granted, silent) = (UUID(), UUID())
        try EventLog(connection: db).append([
            EventFixtures.event(type: "permission.prompted", subject: "s1", occurredAt: "2026-10-03T10:00:00Z", attempt: granted),
            EventFixtures.event(type: "permission.granted", subject: "s1", occurredAt: "2026-10-03T10:00:01Z", attempt: granted),
            EventFixtures.event(type: "permission.prompted", subject: "s2", occurredAt: "2026-10-03T11:00:00Z", attempt: silent,
                                overrides: ["attributes": "{\"dialogShown\":false}"]),
            EventFixtures.event(type: "permission.denied", subject: "s2", occurredAt: "2026-10-03T11:00:00.050Z", attempt: silent,
                                overrides: ["attributes": "{\"permanent\":true}"]),
        ])
        try Projector(connection: try Connection(url: url)).catchUp()
        for view in ["priming_arms", "experiment_arms"] {
            let row = try db.query("select attempts, prompted, granted, denied, denied_at_dialog, denied_without_dialog from analytics.\(view)")
                .decode((Int, Int, Int, Int, Int, Int).self)
            XCTAssertEqual(row.count, 1, view)
            XCTAssertTrue(row[0] == (2, 1, 1, 0, 0, 1), "\(view): \(row[0])")
        }
        XCTAssertEqual(try ProjectionOracle.differences(db), [])
    }

    func testOnlyOneProjectorAtATime() throws {
        let first = Projector(connection: try Connection(url: url))
        let second = Projector(connection: try Connection(url: url))
        try first.acquire()
        XCTAssertThrowsError(try second.acquire()) { error in
            guard case .busy(let pid) = error as? ProjectorError else { return XCTFail("\(error)") }
            XCTAssertEqual(pid, first.connection.backendPID)
        }
        try first.release()
        XCTAssertNoThrow(try second.acquire())
    }

    /// A projector that dies during a batch (its connection closed while its server process is
    /// busy) frees the lock within seconds: the server process looks for its client every second
    /// instead of running the batch to its end.
    func testALockHeldByADeadProjectorsBatchIsFreedSoon() throws {
        var first: Projector? = Projector(connection: try Connection(url: url))
        try first!.acquire()
        try first!.connection.sendQuery("select pg_sleep(60)")  // a long batch
        first = nil  // the connection closes as a killed process's would
        let second = Projector(connection: try Connection(url: url))
        let start = Date()
        while true {
            do {
                try second.acquire()
                break
            } catch ProjectorError.busy where Date().timeIntervalSince(start) < 20 {
                Thread.sleep(forTimeInterval: 0.2)
            }
        }  // (busy after 20 s fails the test: without the check it stays busy for the batch's 60 s)
    }

    func testRebuildNeverExposesPartialNumbers() throws {
        let db = try Connection(url: url)
        var random = RandomEvents(seed: 9)
        let events = random.events(attempts: 1500, subjects: 200)
        try TestDatabase.append(events, to: db)
        let projector = Projector(connection: try Connection(url: url))
        try projector.catchUp()
        let total = "select coalesce(sum(attempts), 0)::bigint from analytics.priming_arms"
        let expected = try db.query(total).scalar(Int.self)
        XCTAssertGreaterThan(expected, 500)

        // Analysts read while two rebuilds (in one pass, then in small batches) and a follower run.
        let url = self.url
        let observed = LockedValues<Int>()
        let done = LockedFlag()
        let reader = Thread {
            guard let analyst = try? Connection(url: url) else { return }
            while !done.isSet {
                if let value = try? analyst.query(total).scalar(Int.self) { observed.append(value) }
            }
        }
        reader.start()
        let followerDone = LockedFlag()
        let followThread = Thread {
            guard let connection = try? Connection(url: url) else { return }
            _ = try? Projector(connection: connection).follow(pollInterval: 1, shouldStop: { followerDone.isSet })
        }
        followThread.start()
        let rebuilder = try Projector(url: url)
        try rebuilder.rebuild()
        rebuilder.buildsEmptyProjectionInOnePass = false
        rebuilder.batchSize = 97
        try rebuilder.rebuild()
        try EventLog(connection: db).append([EventFixtures.event(type: "permission.prompted", attempt: UUID(), overrides: ["attributes": "{}"])])
        Thread.sleep(forTimeInterval: 1.5)
        done.set()
        followerDone.set()
        Thread.sleep(forTimeInterval: 1.2)
        let values = observed.values
        XCTAssertGreaterThan(values.count, 10)
        XCTAssertTrue(values.allSatisfy { $0 == expected || $0 == expected + 1 }, "saw partial totals: \(Set(values).sorted())")
        XCTAssertEqual(try db.query(total).scalar(Int.self), expected + 1, "the follower projected the new event after the rebuild")
        XCTAssertEqual(try ProjectionOracle.differences(db), [])
    }

    /// An append sends no notification within 50 ms of one that did (039). A follower woken by
    /// the first looks again every 100 ms for a second, so it projects an append that committed
    /// after its catch-up, without waiting for its polling interval (a minute here).
    func testTheFollowerProjectsAnAppendThatSentNoNotification() throws {
        let db = try Connection(url: url)
        let log = EventLog(connection: db)
        let projected = "select events_projected from projection.checkpoint where name = 'analytics'"
        func waitUntilProjected(_ count: Int) throws -> Bool {
            for _ in 0..<2000 where try db.query(projected).scalar(Int.self) < count { Thread.sleep(forTimeInterval: 0.005) }
            return try db.query(projected).scalar(Int.self) >= count
        }
        try log.append([EventFixtures.event(subject: "s0")])
        let url = self.url
        let stop = LockedFlag()
        let stopped = DispatchSemaphore(value: 0)
        Thread {
            _ = try? Projector(url: url).follow(pollInterval: 60, shouldStop: { stop.isSet })
            stopped.signal()
        }.start()
        defer { stop.set(); stopped.wait() }
        XCTAssertTrue(try waitUntilProjected(1), "the follower's first catch-up")
        Thread.sleep(forTimeInterval: 0.3)  // the follower waits for a notification

        try log.append([EventFixtures.event(subject: "s1")])  // notifies
        try db.execute("begin")
        try log.append([EventFixtures.event(subject: "s2")])  // within 50 ms: no notification
        XCTAssertTrue(try waitUntilProjected(2), "woken by the first append")
        Thread.sleep(forTimeInterval: 0.3)  // a caller slower than the first look again (100 ms)
        try db.execute("commit")  // after the catch-up that the notification started
        XCTAssertTrue(try waitUntilProjected(3), "the second append, projected by a look within a second of the wake-up")
    }

    /// A rebuild that starts while another projector's batch holds the checkpoint row waits for
    /// that batch (019), instead of deleting the counts the batch is about to update and then
    /// deadlocking with it on the checkpoint row.
    func testARebuildWaitsForTheBatchInFlight() throws {
        let db = try Connection(url: url)
        var random = RandomEvents(seed: 11)
        var events = random.events(attempts: 400, subjects: 50)
        events.shuffle(using: &random.generator)  // the second part updates attempts and counts of the first
        try TestDatabase.append(Array(events[..<(events.count * 2 / 3)]), to: db)
        try Projector(connection: try Connection(url: url)).catchUp()
        try TestDatabase.append(Array(events[(events.count * 2 / 3)...]), to: db)

        let inFlight = try Connection(url: url)
        try inFlight.execute("begin")
        try inFlight.execute("select from projection.checkpoint where name = 'analytics' for update")
        let url = self.url
        let errors = LockedValues<String>()
        let finished = LockedFlag()
        let rebuild = Thread {
            do { try Projector(url: url).rebuild() } catch { errors.append("\(error)") }
            finished.set()
        }
        rebuild.start()
        Thread.sleep(forTimeInterval: 1)  // the rebuild has started and waits for the checkpoint row
        XCTAssertFalse(finished.isSet)
        XCTAssertNoThrow(try inFlight.query("select * from projection.apply_batch(100000)"))
        try inFlight.execute("commit")
        for _ in 0..<600 where !finished.isSet { Thread.sleep(forTimeInterval: 0.1) }
        XCTAssertTrue(finished.isSet)
        XCTAssertEqual(errors.values, [])
        XCTAssertEqual(try ProjectionOracle.differences(db), [])
    }
}

final class LockedValues<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [Value] = []
    func append(_ value: Value) { lock.lock(); storage.append(value); lock.unlock() }
    var values: [Value] { lock.lock(); defer { lock.unlock() }; return storage }
}

final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var flag = false
    func set() { lock.lock(); flag = true; lock.unlock() }
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return flag }
}
