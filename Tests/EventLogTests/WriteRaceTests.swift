import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

/// Races of the write path with other transactions, each staged with a transaction held open
/// (no sleeps decide the outcome; a short pause only lets a call reach its lock wait).
final class WriteRaceTests: DatabaseTestCase {
    var db: Connection!

    override func setUpWithError() throws {
        try super.setUpWithError()
        db = try Connection(url: url)
    }

    override func tearDown() {
        db = nil
        super.tearDown()
    }

    /// An install erased while a batch of several events waits for another install's lock has
    /// no link left when the batch gets there: its event starts a new stream (it was refused as
    /// "already stored with different content", and not stored).
    func testAnInstallErasedWhileABatchWaitsStartsANewStream() throws {
        let log = EventLog(connection: db)
        try log.append([EventFixtures.event(subject: "a-held"), EventFixtures.event(subject: "z-erased")])
        let holder = try Connection(url: url)
        try holder.execute("BEGIN")
        try EventLog(connection: holder).append([EventFixtures.event(subject: "a-held")])
        // The batch locks in (app, subject) order: a-held (waits), then z-erased.
        let batch = [EventFixtures.event(subject: "a-held"), EventFixtures.event(subject: "z-erased")]
        let call = Concurrently.run(on: url) { try EventLog(connection: $0).append(batch) }
        try Concurrently.waitForALockWait(db)
        XCTAssertNotNil(try db.query("select audit.erase_subject('com.example.app', 'z-erased', 'test')").scalar(Int64?.self))
        try holder.execute("COMMIT")
        let results = try call().get()
        XCTAssertEqual(results.map(\.status), [.appended, .appended])
        let rows = try db.query("""
            select e.stream_version from audit.events e join audit.subject_streams s using (stream_key)
             where s.subject = 'z-erased'
            """).column(as: Int64.self)
        XCTAssertEqual(rows, [0], "a new stream for the erased install")
    }

    /// A batch that finds an install erased holds the installs after it by then: it must not wait
    /// for a writer that re-created the install (which may wait for one of those). Staged: H
    /// holds x and G holds y; E erases x; A (one call) appends [x, y] and waits for x, then (x
    /// erased) for y; B (a transaction of two calls) appends [x], re-creating x; G commits, A
    /// locks y and finds x missing and held by B; B appends [y]. A gives up at once with a
    /// serialization failure instead of a deadlock; through the library it runs again and
    /// succeeds. B never fails.
    func testABatchThatFindsAnInstallErasedDoesNotWaitOutOfOrder() throws {
        for viaLibrary in [false, true] {
            let app = "com.example.erased\(viaLibrary ? 1 : 0)"
            let x = { EventFixtures.event(subject: "x", app: app) }, y = { EventFixtures.event(subject: "y", app: app) }
            try EventLog(connection: db).append([x(), y()])
            let h = try Connection(url: url), g = try Connection(url: url)
            try h.execute("BEGIN")
            try EventLog(connection: h).append([x()])
            try g.execute("BEGIN")
            try EventLog(connection: g).append([y()])
            let erasure = Concurrently.run(on: url) { try $0.query("select audit.erase_subject($1, 'x', 'test')", [app]).scalar(Int64?.self) }
            try Concurrently.waitForALockWait(db, backends: 1)
            let batch = "[" + x() + "," + y() + "]"
            let a = Concurrently.run(on: url) { connection -> [String] in
                if viaLibrary { return try EventLog(connection: connection).append(jsonArray: batch).map(\.status.rawValue) }
                return try connection.query("select status from audit.append_events($1::jsonb)", [batch]).column(as: String.self)
            }
            try Concurrently.waitForALockWait(db, backends: 2)
            try h.execute("COMMIT")
            XCTAssertNotNil(try erasure().get())  // A now waits for y (G)
            let b = try Connection(url: url)
            try b.execute("BEGIN")
            XCTAssertEqual(try EventLog(connection: b).append([x()]).map(\.status), [.appended], "x re-created by B")
            try g.execute("COMMIT")  // A locks y, then finds x held by B
            XCTAssertEqual(try EventLog(connection: b).append([y()]).map(\.status), [.appended], "B never fails")
            try b.execute("COMMIT")
            // No deadlock either way. On a loaded machine A may still be on its way from x to y
            // when G commits: B then takes y and commits first, and A finds x re-created and
            // committed, and appends at once (seen once in a CI run).
            switch a() {
            case .success(let statuses):
                XCTAssertEqual(statuses, ["appended", "appended"])
            case .failure(let error):
                XCTAssertFalse(viaLibrary, "the library runs the call again: \(error)")
                XCTAssertEqual((error as? PostgresError)?.code, .serializationFailure, "\(error)")
            }
        }
    }

    /// A retry that races its own first attempt with the same expected version: the first
    /// attempt stores the events while the retry waits for the stream lock. The retry's answer
    /// is duplicate, not "wrong expected version" (one event and a batch).
    func testARetryRacingItsFirstAttemptIsADuplicate() throws {
        for count in [1, 3] {
            let subject = "retry-\(count)"
            let events = (0..<count).map { _ in EventFixtures.event(subject: subject) }
            let first = try Connection(url: url)
            try first.execute("BEGIN")
            XCTAssertEqual(try EventLog(connection: first).append(events, expectedVersion: -1).map(\.status),
                           Array(repeating: .appended, count: count))
            let retry = Concurrently.run(on: url) { try EventLog(connection: $0).append(events, expectedVersion: -1) }
            try Concurrently.waitForALockWait(db)
            try first.execute("COMMIT")
            XCTAssertEqual(try retry().get().map(\.status), Array(repeating: .duplicate, count: count), "\(count) events")
            // A different event with the now-stale version is still refused.
            XCTAssertThrowsError(try EventLog(connection: db).append([EventFixtures.event(subject: subject)], expectedVersion: -1)) { error in
                XCTAssertEqual((error as? AppendError)?.kind, .wrongExpectedVersion)
            }
        }
    }

    /// A call outside a transaction that PostgreSQL picks as a deadlock victim stored nothing:
    /// the library runs it again, and it succeeds once the other transaction is through.
    func testADeadlockVictimCallRunsAgain() throws {
        let holder = try Connection(url: url)
        try holder.execute("BEGIN")
        try EventLog(connection: holder).append([EventFixtures.event(subject: "b")])
        // The call locks a, then waits for b (held); the holder then waits for a: a deadlock,
        // found by the call, which waited first.
        let batch = [EventFixtures.event(subject: "a"), EventFixtures.event(subject: "b")]
        let call = Concurrently.run(on: url) { try EventLog(connection: $0).append(batch) }
        try Concurrently.waitForALockWait(db)
        try EventLog(connection: holder).append([EventFixtures.event(subject: "a")])
        try holder.execute("COMMIT")
        XCTAssertEqual(try call().get().map(\.status), [.appended, .appended])
        XCTAssertEqual(try db.query("select count(*)::int from audit.events").scalar(Int.self), 4)

        // Inside the caller's transaction, the error is the caller's.
        try holder.execute("BEGIN")
        try EventLog(connection: holder).append([EventFixtures.event(subject: "d")])
        let inTransaction = Concurrently.run(on: url) { connection -> [EventLog.AppendResult] in
            try connection.execute("BEGIN")
            defer { try? connection.execute("ROLLBACK") }
            return try EventLog(connection: connection).append([EventFixtures.event(subject: "c"), EventFixtures.event(subject: "d")])
        }
        try Concurrently.waitForALockWait(db)
        try EventLog(connection: holder).append([EventFixtures.event(subject: "c")])
        try holder.execute("COMMIT")
        XCTAssertThrowsError(try inTransaction().get()) { error in
            XCTAssertEqual((error as? PostgresError)?.code, .deadlockDetected)
        }
    }
}
