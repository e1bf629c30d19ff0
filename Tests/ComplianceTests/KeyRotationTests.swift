import Compliance
import Crypto
import Foundation
import Postgres
import TestSupport
import XCTest

/// The seal key changes (046): the chain's key hands it over to the next after its last seal,
/// and verify follows the handovers from the chain's first key.
final class KeyRotationTests: XCTestCase {
    /// Two seals by A, a handover to B, a seal by B.
    func handedOver(_ sealed: SealedDatabase, to next: SigningKey) throws {
        try Sealer(key: sealed.key).handOver(on: sealed.db) { try next.publicKey }
        var random = RandomEvents(seed: 9)
        try TestDatabase.append(random.events(attempts: 10, subjects: 5), to: sealed.db)
        XCTAssertEqual(try Sealer(key: next).seal(sealed.db).count, 1)
    }

    func testAHandedOverChainVerifiesFromItsFirstKey() throws {
        let sealed = try SealedDatabase(events: 120, perSeal: 100)
        defer { sealed.drop() }
        let b = try SigningKey.generate(), c = try SigningKey.generate()
        try Sealer(key: sealed.key).handOver(on: sealed.db) { try b.publicKey }
        var random = RandomEvents(seed: 9)
        try TestDatabase.append(random.events(attempts: 10, subjects: 5), to: sealed.db)
        XCTAssertThrowsError(try Sealer(key: sealed.key).seal(sealed.db)) { error in
            XCTAssertTrue("\(error)".contains("seal 2, the last of the chain, handed the chain over to key"), "\(error)")
        }
        XCTAssertThrowsError(try Sealer(key: sealed.key).handOver(on: sealed.db) { try c.publicKey }) { error in
            XCTAssertTrue("\(error)".contains("the chain was handed over after seal 2 already"), "\(error)")
        }
        XCTAssertEqual(try Sealer(key: b).seal(sealed.db).count, 1)
        XCTAssertThrowsError(try Sealer(key: sealed.key).handOver(on: sealed.db) { try c.publicKey }) { error in
            XCTAssertTrue("\(error)".contains("only the chain's key can hand it over"), "\(error)")
        }
        // A second change: B hands over to C.
        try Sealer(key: b).handOver(on: sealed.db) { try c.publicKey }
        try TestDatabase.append(random.events(attempts: 5, subjects: 5), to: sealed.db)
        XCTAssertEqual(try Sealer(key: c).seal(sealed.db).count, 1)

        let fromFirst = try sealed.verify()
        XCTAssertTrue(fromFirst.intact, fromFirst.lines.joined(separator: "\n"))
        XCTAssertEqual(fromFirst.sealsValid, 4)
        XCTAssertEqual([fromFirst.handoversValid, fromFirst.handoversChecked], [2, 2])
        XCTAssertEqual(fromFirst.unsealed, 0)
        // Led from the first key to the current one; not to another.
        XCTAssertTrue(try Verifier(publicKey: try sealed.key.publicKey, currentKey: try c.publicKey).verify(url: sealed.url).intact)
        let behind = try Verifier(publicKey: try sealed.key.publicKey, currentKey: try b.publicKey).verify(url: sealed.url)
        XCTAssertEqual(behind.failures.map(\.kind), [.unexpectedKey])
        // A later key alone does not vouch for the seals before its handover.
        let fromLater = try Verifier(publicKey: try c.publicKey).verify(url: sealed.url)
        XCTAssertFalse(fromLater.intact)
        XCTAssertEqual(fromLater.failures.first?.kind, .badSignature)
        XCTAssertEqual(fromLater.failures.first?.sealId, 1)
    }

    /// A handover deleted, or pointed at another key (whose seal follows), is found.
    func testATamperedHandoverIsFound() throws {
        let attacker = try SigningKey.generate()
        let cases: [(String, (SealedDatabase) throws -> Void, [Verifier.Failure.Kind])] = [
            ("deleted", { try $0.tamper("delete from audit.key_handovers") }, [.badSignature]),
            ("pointed at another key", { sealed in
                try sealed.tamper("update audit.key_handovers set to_public_key = decode('\(Hex.encode(try attacker.publicKey.raw))', 'hex')")
                try sealed.tamper("delete from audit.seals where seal_id = 3")
                var random = RandomEvents(seed: 11)
                try TestDatabase.append(random.events(attempts: 3, subjects: 3), to: sealed.db)
                XCTAssertEqual(try Sealer(key: attacker).seal(sealed.db).count, 1)
            }, [.badHandover, .badSignature]),
        ]
        for (name, tamper, kinds) in cases {
            let sealed = try SealedDatabase(events: 120, perSeal: 100)
            defer { sealed.drop() }
            try handedOver(sealed, to: try SigningKey.generate())
            XCTAssertTrue(try sealed.verify().intact, name)
            try tamper(sealed)
            let result = try sealed.verify()
            XCTAssertEqual(result.failures.map(\.kind), kinds, "\(name): \(result.lines)")
            XCTAssertEqual(result.failures.last?.sealId, 3, name)
            XCTAssertEqual(result.handoversValid, 0, name)
        }
    }

    /// An attacker with the database and a retired private key rewrites the history: from that
    /// key's seals on (the new key's seals dropped, the chain handed to a key of the attacker's);
    /// from the first seal as if a later key had been the first; or with the first key, handed
    /// straight to the current key past the one between. Verify, trusting the first key, the
    /// current one and the retired ones, finds each.
    func testARetiredKeyCannotRewriteTheChain() throws {
        let attacker = try SigningKey.generate()
        do {
            let sealed = try SealedDatabase(events: 120, perSeal: 100)
            defer { sealed.drop() }
            let b = try SigningKey.generate()
            try handedOver(sealed, to: b)
            try sealed.tamper("delete from audit.seals where seal_id = 3; delete from audit.key_handovers")
            try Sealer(key: sealed.key).handOver(on: sealed.db) { try attacker.publicKey }
            XCTAssertEqual(try Sealer(key: attacker).seal(sealed.db).count, 1)
            XCTAssertTrue(try Verifier(publicKey: try sealed.key.publicKey).verify(url: sealed.url).intact, "the first key alone cannot tell")
            let result = try Verifier(publicKey: try sealed.key.publicKey, currentKey: try b.publicKey).verify(url: sealed.url)
            XCTAssertEqual(result.failures.map(\.kind), [.unexpectedKey], result.lines.joined(separator: "\n"))
        }
        /// A to B to C, then every seal and handover gone, and an event.
        func erasedChainOfThree(_ sealed: SealedDatabase) throws -> (b: SigningKey, c: SigningKey) {
            let b = try SigningKey.generate(), c = try SigningKey.generate()
            try handedOver(sealed, to: b)
            try Sealer(key: b).handOver(on: sealed.db) { try c.publicKey }
            try sealed.tamper("delete from audit.key_handovers; delete from audit.seals; delete from audit.events where position = 50")
            return (b, c)
        }
        do {
            let sealed = try SealedDatabase(events: 120, perSeal: 100)
            defer { sealed.drop() }
            let (b, c) = try erasedChainOfThree(sealed)
            XCTAssertEqual(try Sealer(key: b).seal(sealed.db).count, 1)
            try Sealer(key: b).handOver(on: sealed.db) { try c.publicKey }
            let result = try Verifier(publicKey: try sealed.key.publicKey, currentKey: try c.publicKey).verify(url: sealed.url)
            XCTAssertEqual(result.failures.first?.kind, .badSignature, result.lines.joined(separator: "\n"))
            XCTAssertEqual(result.failures.first?.sealId, 1)
        }
        do {
            let sealed = try SealedDatabase(events: 120, perSeal: 100)
            defer { sealed.drop() }
            let (b, c) = try erasedChainOfThree(sealed)
            XCTAssertEqual(try Sealer(key: sealed.key).seal(sealed.db).count, 1)
            try Sealer(key: sealed.key).handOver(on: sealed.db) { try c.publicKey }
            let first = try sealed.key.publicKey
            XCTAssertTrue(try Verifier(publicKey: first, currentKey: try c.publicKey).verify(url: sealed.url).intact,
                          "first and current key alone cannot tell")
            let result = try Verifier(publicKey: first, currentKey: try c.publicKey, retiredKeys: [first, try b.publicKey]).verify(url: sealed.url)
            XCTAssertEqual(result.failures.map(\.kind), [.unexpectedKey], result.lines.joined(separator: "\n"))
            XCTAssertTrue(result.failures[0].detail.contains("does not pass through the retired key \(try b.publicKey.fingerprint.prefix(16))"))
        }
    }

    /// A handover that its seal's key did not sign (a role that may add handovers can store one)
    /// is reported, and does not stop that key from sealing; a handover to the same key is refused.
    func testAForgedHandoverDoesNotStopTheSealing() throws {
        let sealed = try SealedDatabase(events: 120, perSeal: 100)
        defer { sealed.drop() }
        XCTAssertThrowsError(try Sealer(key: sealed.key).handOver(on: sealed.db) { try sealed.key.publicKey }) { error in
            XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA022", "\(error)")
        }
        let other = try SigningKey.generate()
        try sealed.db.query("""
            select audit.add_key_handover(2, $1, decode($2, 'hex'), now(), decode(repeat('ab', 64), 'hex'))
            """, [try sealed.key.publicKey.fingerprint, Hex.encode(try other.publicKey.raw)])
        var random = RandomEvents(seed: 13)
        try TestDatabase.append(random.events(attempts: 5, subjects: 5), to: sealed.db)
        XCTAssertEqual(try Sealer(key: sealed.key).seal(sealed.db).count, 1, "the chain's key goes on")
        XCTAssertThrowsError(try Sealer(key: other).seal(sealed.db), "the forged handover's key may not seal")
        let result = try Verifier(publicKey: try sealed.key.publicKey, currentKey: try sealed.key.publicKey).verify(url: sealed.url)
        XCTAssertEqual(result.failures.map(\.kind), [.badHandover], result.lines.joined(separator: "\n"))
        XCTAssertEqual(result.sealsValid, 3)
    }

    /// The records are append-only to every role, the owner's included.
    func testAHandoverCannotBeChanged() throws {
        let sealed = try SealedDatabase(events: 120, perSeal: 100)
        defer { sealed.drop() }
        try handedOver(sealed, to: try SigningKey.generate())
        for sql in ["delete from audit.key_handovers", "update audit.key_handovers set handed_over_at = now()", "truncate audit.key_handovers"] {
            XCTAssertThrowsError(try sealed.db.execute(sql), sql) { error in
                XCTAssertEqual((error as? PostgresError)?.code.rawValue, "PA010", "\(error)")
            }
        }
    }
}
