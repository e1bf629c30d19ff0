import Compliance
import Crypto
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

    func testEveryTamperingIsDetectedAtItsFirstPosition() throws {
        let cases: [(String, String, Verifier.Failure.Kind, Int64?)] = [
            ("modify a payload", "update audit.events set payload = jsonb_set(payload, '{appVersion}', '\"9.9.9\"') where position = 142",
             .modified, 142),
            ("modify a hot column", "update audit.events set os_major = os_major + 1 where position = 57", .modified, 57),
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
            ("alter a seal's root", "update audit.seals set merkle_root = sha256(merkle_root) where seal_id = 2", .alteredSeal, 101),
            // Bytes are flipped (writing a fixed byte changes nothing when it is already that byte: 1 run in 256).
            ("alter a seal's leaves", "update audit.seals set leaves = set_byte(leaves, 39, get_byte(leaves, 39) # 255) where seal_id = 3", .alteredSeal, 201),
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
