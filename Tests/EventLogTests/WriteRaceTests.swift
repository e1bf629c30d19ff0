import EventLog
import Foundation
import Postgres
import TestSupport
import XCTest

/// Races of the write path with other transactions, each staged with a transaction held open
/// (no sleeps decide the outcome; a short pause only lets a call reach its lock wait).
final class WriteRaceTests: XCTestCase {
    var url = ""
    var db: Connection!

    override func setUpWithError() throws {
        url = try TestDatabase.create()
        db = try Connection(url: url)
    }

    override func tearDown() {
        db = nil
        TestDatabase.drop(url)
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
