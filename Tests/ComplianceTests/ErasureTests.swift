import Compliance
import Crypto
import EventLog
import Foundation
import Postgres
import Projections
import TestSupport
import XCTest

final class ErasureTests: XCTestCase {
    func testAfterErasureNothingConnectsTheInstallIdAndTheSealsStillVerify() throws {
        let sealed = try SealedDatabase(events: 120, perSeal: 100)
        defer { sealed.drop() }
        let db = sealed.db
        let secret = "inst-erase-me-7f3a91c2"
        let attempt = UUID()
        try TestDatabase.append([
            EventFixtures.event(type: "permission.prompted", subject: secret, attempt: attempt, removing: ["attributes"]),
            EventFixtures.event(type: "permission.granted", subject: secret, occurredAt: "2026-10-03T09:16:00.000Z", attempt: attempt,
                                removing: ["attributes"]),
        ], to: db)
        try Sealer(key: sealed.key).seal(db)
        try Projector(connection: db).catchUp()
        let before = try TestDatabase.analyticsSnapshot(db)
        let grantedInstalls = "select coalesce(sum(installs), 0)::int from analytics.permission_state_counts where state = 'granted'"
        let grantedBefore = try db.query(grantedInstalls).scalar(Int.self)
        XCTAssertEqual(grantedBefore, try db.query("select count(*)::int from analytics.permission_state where state = 'granted'").scalar(Int.self))

        let exported = try SubjectRights.export(db, app: "com.example.app", subject: secret)
        XCTAssertEqual(exported.count, 2)
        XCTAssertEqual(exported.map(\.sealId), [3, 3], "the second sealing made seal 3")
        XCTAssertTrue(exported.allSatisfy { $0.json.contains("\"subject\": \"\(secret)\"") })
        // The database recorded the access request itself, without the install id; so it does
        // for a call in plain SQL.
        XCTAssertEqual(try db.query("select count(*)::int from audit.subject_events('com.example.app', $1)", [secret]).scalar(Int.self), 2)
        let accesses = try db.query("select command, details::text from audit.access_log order by access_id").decode((String, String).self)
        XCTAssertEqual(accesses.map(\.0), ["audit.subject_events", "audit.subject_events"])
        XCTAssertEqual(accesses.map(\.1), ["{\"app\": \"com.example.app\", \"events\": 2}", "{\"app\": \"com.example.app\", \"events\": 2}"])

        // A reason holding the install id (in any letter case) is refused: the record is kept for
        // good. Nothing is erased or recorded, and the message does not repeat the id.
        let erasuresBefore = try db.query("select count(*)::int from audit.erasures").scalar(Int.self)
        XCTAssertThrowsError(try SubjectRights.erase(db, app: "com.example.app", subject: secret, reason: "ticket 12: \(secret.uppercased())")) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA021", "\(error)")
            XCTAssertFalse("\(error)".lowercased().contains(secret), "\(error)")
        }
        XCTAssertEqual(try db.query("select count(*)::int from audit.erasures").scalar(Int.self), erasuresBefore)
        XCTAssertEqual(try SubjectRights.export(db, app: "com.example.app", subject: secret).count, 2, "still linked")

        let key = try XCTUnwrap(try SubjectRights.erase(db, app: "com.example.app", subject: secret, reason: "GDPR art. 17 request 42")).streamKey
        XCTAssertNil(try SubjectRights.erase(db, app: "com.example.app", subject: secret, reason: "again"))
        XCTAssertThrowsError(try SubjectRights.erase(db, app: "com.example.app", subject: "other", reason: " "))
        try SubjectRights.recordAccess(db, command: "audit erase", details: ["app": "com.example.app", "streamKey": "\(key)"])

        XCTAssertEqual(try SubjectRights.export(db, app: "com.example.app", subject: secret).count, 0)
        // The install leaves the installs per state too.
        XCTAssertEqual(try db.query(grantedInstalls).scalar(Int.self), grantedBefore - 1)
        // The counts stay; the install's own row of analytics.permission_state goes with its link.
        let stateRow = "permission_state (com.example.app,\(secret),android.READ_MEDIA_IMAGES,granted,"
        XCTAssertEqual(before.filter { $0.hasPrefix(stateRow) }.count, 1)
        let after = before.filter { !$0.hasPrefix(stateRow) }
        XCTAssertEqual(try TestDatabase.analyticsSnapshot(db), after)
        try Projector(connection: db).rebuild()
        XCTAssertEqual(try TestDatabase.analyticsSnapshot(db), after, "a rebuild gives the same numbers")
        XCTAssertTrue(try sealed.verify().intact)
        let erasure = try db.query("select app, stream_key, reason from audit.erasures").decode((String, Int64, String).self)
        XCTAssertEqual(erasure.map { "\($0.0) \($0.1) \($0.2)" }, ["com.example.app \(key) GDPR art. 17 request 42"])

        // No table holds the install id any more ...
        let tables = try db.query("""
            select format('%I.%I', n.nspname, c.relname) from pg_class c join pg_namespace n on n.oid = c.relnamespace
             where c.relkind = 'r' and n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast')
            """).column(as: String.self)
        XCTAssertGreaterThan(tables.count, 10)
        for table in tables {
            let hits: Int = try db.query("select count(*)::bigint from \(table) t where t::text like '%' || $1 || '%'", [secret]).scalar()
            XCTAssertEqual(hits, 0, table)
        }
        // ... and neither does a dump of the database.
        let dump = Process()
        dump.executableURL = URL(fileURLWithPath: try PostgresBinaries.locate().path("pg_dump"))
        dump.arguments = ["--dbname=\(sealed.url)", "--no-owner"]
        let out = Pipe()
        dump.standardOutput = out
        try dump.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        dump.waitUntilExit()
        XCTAssertEqual(dump.terminationStatus, 0)
        XCTAssertTrue(text.contains("GDPR art. 17 request 42"), "the dump holds the data")
        XCTAssertFalse(text.contains(secret))
    }

    /// Install ids shorter than 6 characters are not looked for in the reason: they occur in
    /// ordinary words and numbers. From 6 characters on they are.
    func testAReasonIsCheckedForInstallIdsOfSixCharactersOrMore() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        try TestDatabase.append([EventFixtures.event(subject: "42"), EventFixtures.event(subject: "ab12cd")], to: db)
        XCTAssertNotNil(try SubjectRights.erase(db, app: "com.example.app", subject: "42", reason: "GDPR request 42"))
        XCTAssertThrowsError(try SubjectRights.erase(db, app: "com.example.app", subject: "ab12cd", reason: "request for AB12CD")) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA021", "\(error)")
        }
    }

    /// The contract does not keep an install id out of an event's other fields, and the log
    /// keeps them for good: an erasure says how many of the install's events hold the id (in any
    /// letter case, as it is written inside the JSON), ids of 6 characters or more.
    func testAnErasureCountsTheEventsThatStillHoldTheId() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        let secret = #"inst-"q"-77"#
        try TestDatabase.append([
            EventFixtures.event(subject: secret, overrides: ["attributes": #"{"permanent":false,"installId":"INST-\"Q\"-77"}"#]),
            EventFixtures.event(subject: secret, overrides: ["experiments": #"{"inst-\"q\"-77":"a"}"#]),
            EventFixtures.event(subject: secret),
            EventFixtures.event(subject: "another-install", overrides: ["attributes": #"{"installId":"inst-\"q\"-77"}"#]),
            EventFixtures.event(subject: "abc12", overrides: ["attributes": #"{"installId":"abc12"}"#]),
        ], to: db)
        XCTAssertEqual(try SubjectRights.erase(db, app: "com.example.app", subject: secret, reason: "request 9")?.eventsHoldingTheId, 2,
                       "not the other install's event")
        XCTAssertEqual(try SubjectRights.erase(db, app: "com.example.app", subject: "abc12", reason: "request 10")?.eventsHoldingTheId, 0,
                       "an id under 6 characters is not looked for")
    }
}
