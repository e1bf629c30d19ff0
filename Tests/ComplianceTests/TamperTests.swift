import Compliance
import Crypto
import Projections
import Foundation
import Postgres
import TestSupport
import XCTest

/// An attacker with superuser rights and the triggers off changes the log or the seals; each
/// change is detected and located.
final class TamperTests: XCTestCase {
    func testAnUntouchedLogVerifiesAndTheTailIsReported() throws {
        let sealed = try SealedDatabase()
        defer { sealed.drop() }
        XCTAssertEqual(sealed.seals.map(\.eventCount), [100, 100, 100])
        var result = try sealed.verify()
        XCTAssertTrue(result.intact, result.lines.joined(separator: "\n"))
        XCTAssertEqual(result.sealsValid, 3)
        XCTAssertEqual(result.eventsValid, 300)
        XCTAssertEqual(result.found, 1...300)
        XCTAssertEqual(result.unsealed, 0)
        // New events are an unsealed tail until the next seal.
        try TestDatabase.append([EventFixtures.event(subject: "late-1"), EventFixtures.event(subject: "late-2")], to: sealed.db)
        result = try sealed.verify()
        XCTAssertTrue(result.intact)
        XCTAssertEqual(result.unsealed, 2)
        XCTAssertEqual(result.firstUnsealed, 301)
        XCTAssertEqual(try Sealer(key: sealed.key).seal(sealed.db).map(\.eventCount), [2])
        XCTAssertEqual(try sealed.verify().unsealed, 0)
        // A range check looks at the seals holding those positions only.
        result = try sealed.verify(150...160)
        XCTAssertTrue(result.intact)
        XCTAssertEqual(result.eventsChecked, 100)
    }

    /// The positions stored with a seal's leaves are not signed: moved out of a range (here by
    /// 1000), they do not take the seal, and an event changed under it, out of a range check.
    func testARangeCheckIsNotMisledByTheSealsStoredPositions() throws {
        let sealed = try SealedDatabase()
        defer { sealed.drop() }
        try sealed.tamper("""
            update audit.events set app_version = '9.9.9' where position = 10;
            update audit.seals s set leaves = (
                select string_agg(int8send(('x' || encode(substr(s.leaves, i * 56 + 1, 8), 'hex'))::bit(64)::bigint + 1000)
                                  || substr(s.leaves, i * 56 + 9, 48), ''::bytea order by i)
                  from generate_series(0, length(s.leaves) / 56 - 1) i)
             where seal_id = 1
            """)
        let result = try sealed.verify(5...20)
        XCTAssertFalse(result.intact, result.lines.joined(separator: "\n"))
        XCTAssertEqual(result.eventsChecked, 100, "seal 1's events")
        XCTAssertEqual(result.failures.first?.sealId, 1)
    }

    /// analytics.compliance_status counts the unsealed events from the seals' and the projector's
    /// counts (044): the same number as counting the events after the last seal, whichever of the
    /// two is ahead, for the analyst and the auditor.
    func testUnsealedEventsWhicheverOfSealsAndProjectorIsAhead() throws {
        let sealed = try SealedDatabase(events: 300, perSeal: 100)
        defer { sealed.drop() }
        let db = sealed.db
        var random = RandomEvents(seed: 9)
        func check(_ label: String) throws {
            let counted: Int = try db.query("""
                select count(*)::int from audit.events e
                 where (e.transaction_id, e.position) > coalesce((select (s.to_transaction_id, s.to_position) from audit.seals s
                                                                   order by s.seal_id desc limit 1), ('0'::xid8, 0::bigint))
                """).scalar()
            for role in ["permaudit_analyst", "permaudit_auditor"] {
                try db.execute("set role \(role)")
                defer { try? db.execute("reset role") }
                XCTAssertEqual(try db.query("select unsealed_events::int from analytics.compliance_status").scalar(Int.self), counted, "\(label), \(role)")
            }
        }
        try check("sealed, the projector never ran")  // the last seal past the checkpoint: 0
        try TestDatabase.append(random.events(attempts: 40, subjects: 10), to: db)
        try check("sealed, then more events, the projector never ran")
        try Projector(connection: db).catchUp()
        try check("the projector past the last seal")
        try TestDatabase.append(random.events(attempts: 30, subjects: 10), to: db)
        try check("the projector past the last seal, and events it has not reached")
        try Sealer(key: sealed.key).seal(db)
        try check("the last seal past the checkpoint")
        try Projector(connection: db).rebuild()
        try check("after a rebuild")
        try TestDatabase.append(random.events(attempts: 30, subjects: 10), to: db)
        try Projector(connection: db).catchUp()
        try check("after a rebuild and more events")
    }

    /// verify checks the chain against one public key: another key (a lost key volume, a new
    /// keygen) may not extend it, or every later seal would read as tampered.
    func testSealingWithAnotherKeyIsRefused() throws {
        let sealed = try SealedDatabase(events: 120, perSeal: 100)
        defer { sealed.drop() }
        var random = RandomEvents(seed: 5)
        try TestDatabase.append(random.events(attempts: 10, subjects: 5), to: sealed.db)
        let other = try SigningKey.generate()
        XCTAssertThrowsError(try Sealer(key: other).seal(sealed.db)) { error in
            XCTAssertTrue("\(error)".contains("seal 2, the last of the chain, was signed by key"), "\(error)")
        }
        XCTAssertEqual(try sealed.db.query("select count(*)::int from audit.seals").scalar(Int.self), 2)
        XCTAssertEqual(try Sealer(key: sealed.key).seal(sealed.db).count, 1, "the chain's own key goes on")
        XCTAssertTrue(try sealed.verify().intact)
    }

    func testEveryTamperingIsDetectedAtItsFirstPosition() throws {
        let cases: [(String, String, Verifier.Failure.Kind, Int64?)] = [
            ("modify a payload", "update audit.events set payload = jsonb_set(payload, '{appVersion}', '\"9.9.9\"') where position = 142",
             .modified, 142),
            ("modify a hot column", "update audit.events set os_major = os_major + 1 where position = 57", .modified, 57),
            ("give an event another id", "update audit.events set event_id = gen_random_uuid() where position = 142", .modified, 142),
            ("delete a row", "delete from audit.events where position = 230", .deleted, 230),
            ("insert a forged row", """
                insert into audit.events overriding system value
                select 0, transaction_id, gen_random_uuid(), stream_key, 999, type, occurred_at, recorded_at, app, platform, os_major,
                       app_version, attempt, permission, flow, payload
                  from audit.events where position = 5
                """, .inserted, 0),
            ("swap two positions", """
                alter table audit.events alter column position drop identity;
                update audit.events set position = -1 where position = 77;
                update audit.events set position = 77 where position = 78;
                update audit.events set position = 78 where position = -1
                """, .reordered, 77),
            ("truncate the tail", "delete from audit.events where position > 290", .deleted, 291),
            // Moved, not deleted: named where it was sealed.
            ("renumber a seal's events", """
                alter table audit.events alter column position drop identity;
                update audit.events set position = position + 1000 where position between 101 and 200
                """, .reordered, 101),
            ("renumber one event within its seal", """
                alter table audit.events alter column position drop identity;
                update audit.events set position = 1000 where position = 150;
                update audit.events set position = 150 where position = 151;
                update audit.events set position = 151 where position = 1000
                """, .reordered, 150),
            ("give an event a later transaction id", """
                update audit.events set transaction_id = (select max(transaction_id) from audit.events) where position = 120
                """, .reordered, 120),
            ("alter a seal's root", "update audit.seals set merkle_root = sha256(merkle_root) where seal_id = 2", .alteredSeal, 101),
            // Bytes are flipped (writing a fixed byte changes nothing when it is already that byte: 1 run in 256).
            ("alter a seal's leaves", "update audit.seals set leaves = set_byte(leaves, 39, get_byte(leaves, 39) # 255) where seal_id = 3", .alteredSeal, 201),
            // Only the position or the event id stored beside a leaf's hash (bytes 56-63 and 64-79
            // of the second leaf): the events are as sealed, and the seal is what was changed.
            ("alter a position in a seal's leaves", "update audit.seals set leaves = set_byte(leaves, 60, get_byte(leaves, 60) # 255) where seal_id = 3", .alteredSeal, 202),
            ("alter an event id in a seal's leaves", "update audit.seals set leaves = set_byte(leaves, 64, get_byte(leaves, 64) # 255) where seal_id = 3", .alteredSeal, 202),
            ("swap two leaves' positions", """
                update audit.seals set leaves = overlay(overlay(leaves placing substr(leaves, 57, 8) from 1) placing substr(leaves, 1, 8) from 57)
                 where seal_id = 3
                """, .alteredSeal, 201),
            ("corrupt a signature", "update audit.seals set signature = set_byte(signature, 0, get_byte(signature, 0) # 255) where seal_id = 1", .badSignature, 1),
        ]
        for (name, sql, kind, position) in cases {
            let sealed = try SealedDatabase()
            defer { sealed.drop() }
            try sealed.tamper(sql)
            let result = try sealed.verify()
            XCTAssertFalse(result.intact, name)
            XCTAssertEqual(result.failures.first?.kind, kind, "\(name): \(result.lines.joined(separator: "\n"))")
            XCTAssertEqual(result.failures.first?.position, position, "\(name): \(result.lines.joined(separator: "\n"))")
        }
    }

    /// A look-alike function put in front of PostgreSQL's own by the database's search_path
    /// (here one that hides the changed event's hash) does not reach verify's queries.
    func testASearchPathSettingCannotHideTampering() throws {
        let sealed = try SealedDatabase()
        defer { sealed.drop() }
        let database: String = try sealed.db.query("select current_database()::text").scalar()
        try sealed.db.execute("""
            create schema shadow;
            create function shadow.encode(bytea, text) returns text language sql as 'select ''0''';
            alter database "\(database)" set search_path = shadow, pg_catalog, public
            """)
        try sealed.tamper("update audit.events set app_version = '9.9.9' where position = 100")
        let result = try sealed.verify()
        XCTAssertEqual(result.failures.first?.kind, .modified, result.lines.joined(separator: "\n"))
        XCTAssertEqual(result.failures.first?.position, 100)
    }

    func testABrokenChainIsNamed() throws {
        let sealed = try SealedDatabase()
        defer { sealed.drop() }
        // A forger re-signs seal 2 with their own key and another previous hash: the chain and
        // the key both give it away.
        try sealed.tamper("update audit.seals set previous_hash = sha256(previous_hash) where seal_id = 2")
        let kinds = try sealed.verify().failures.map(\.kind)
        XCTAssertTrue(kinds.contains(.brokenChain), "\(kinds)")
        XCTAssertTrue(kinds.contains(.badSignature), "\(kinds)")
    }

    /// A sealing role cannot add a seal whose range is not the log's (032): one reaching past the
    /// log's end swallowed every later event, and sealing stopped.
    func testASealMustCoverTheLogsOwnEvents() throws {
        let sealed = try SealedDatabase(events: 120, perSeal: 100)
        defer { sealed.drop() }
        let last = try XCTUnwrap(sealed.seals.last)
        try TestDatabase.append([EventFixtures.event(subject: "after-the-seals")], to: sealed.db)
        let next: (String, Int64) = try sealed.db.query("""
            select transaction_id::text, position from audit.events order by transaction_id desc, position desc limit 1
            """).decode((String, Int64).self)[0]
        func forge(to: (String, Int64), count: Int64) throws {
            try sealed.db.execute("begin; set local role permaudit_auditor")
            defer { _ = try? sealed.db.execute("rollback") }
            try sealed.db.query("""
                select audit.add_seal($1, $2::xid8, $3, $4::xid8, $5, $6, sha256('root'), decode(repeat('00', 56 * $6::bigint::int), 'hex'), decode($7, 'hex'), now(),
                                      repeat('a', 64), sha256('seal'), decode(repeat('00', 64), 'hex'))
                """, [last.id + 1, String(last.through.transactionId), last.through.position, to.0, to.1, count, Hex.encode(last.sealHash)])
        }
        for (name, to, count) in [("past the log's end", ("999999", Int64(999_999)), Int64(1)), ("miscounted", next, 2), ("not an event", (next.0, next.1 + 1), 1)] {
            XCTAssertThrowsError(try forge(to: to, count: count), name) { error in
                XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA020", "\(name): \(error)")
                XCTAssertTrue("\(error)".contains("seal range is not the log's"), "\(name): \(error)")
            }
        }
        XCTAssertNoThrow(try forge(to: next, count: 1), "the log's own range, however signed, is the verifier's to judge")  // (rolled back)
        XCTAssertEqual(try Sealer(key: sealed.key).seal(sealed.db).map(\.eventCount), [1])
    }

    func testInclusionProofsCheckOfflineAndFailWhenTheEventChanged() throws {
        let sealed = try SealedDatabase(events: 150, perSeal: 100)
        defer { sealed.drop() }
        let id: UUID = try sealed.db.query("select event_id from audit.events where position = 120").scalar()
        let proof = try InclusionProof.make(sealed.db, eventId: id)
        XCTAssertEqual(proof.seal.id, 2)
        XCTAssertEqual(proof.leafIndex, 19)
        let reread = try InclusionProof(json: proof.json)
        XCTAssertNoThrow(try reread.check(publicKey: try sealed.key.publicKey))
        XCTAssertThrowsError(try reread.check(publicKey: try SigningKey.generate().publicKey))
        var forged = reread
        forged.canonical = forged.canonical.replacingOccurrences(of: "\"android\"", with: "\"ios\"")
        forged.canonical = forged.canonical == reread.canonical ? forged.canonical.replacingOccurrences(of: "\"ios\"", with: "\"android\"") : forged.canonical
        XCTAssertThrowsError(try forged.check(publicKey: try sealed.key.publicKey))
        var moved = reread
        moved.leafIndex += 1
        XCTAssertThrowsError(try moved.check(publicKey: try sealed.key.publicKey))
        // The position and the event id are read from the canonical form, not trusted as written.
        var renumbered = reread
        renumbered.position = 5
        XCTAssertThrowsError(try renumbered.check(publicKey: try sealed.key.publicKey))
        XCTAssertThrowsError(try InclusionProof(json: proof.json.replacingOccurrences(of: "\"version\":1", with: "\"version\":2")))
    }
}
