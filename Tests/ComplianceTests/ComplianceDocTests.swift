import Compliance
import Crypto
import Foundation
import Postgres
import TestSupport
import XCTest

/// Golden vectors: the psql recipes of docs/compliance.md give the hashes, roots and seal hashes
/// the Swift code computed and signed.
final class ComplianceDocTests: XCTestCase {
    func testThePsqlRecipesAgreeWithTheSwiftCode() throws {
        let sealed = try SealedDatabase(events: 250, perSeal: 100)
        defer { sealed.drop() }
        let blocks = try TestDatabase.sqlBlocks(ofDocument: "docs/compliance.md")
        XCTAssertEqual(blocks.count, 4)
        let stored = try XCTUnwrap(try Seal.leaves(sealed.db, sealId: 1))

        let leaves = try sealed.db.query(blocks[0]).decode((Int64, String).self)
        XCTAssertEqual(leaves.map(\.0), stored.map(\.position))
        XCTAssertEqual(leaves.map(\.1), stored.map { Hex.encode($0.hash) })

        let (root, sealedRoot) = try sealed.db.query(blocks[1]).decode((String, String).self)[0]
        XCTAssertEqual(root, Hex.encode(Merkle.root(stored.map(\.hash))))
        XCTAssertEqual(sealedRoot, Hex.encode(sealed.seals[0].merkleRoot))
        XCTAssertEqual(root, sealedRoot)

        let chain = try sealed.db.query(blocks[2]).decode((Int64, String, String, Bool).self)
        XCTAssertEqual(chain.map(\.0), [1, 2, 3])
        for (row, seal) in zip(chain, sealed.seals) {
            XCTAssertEqual(row.1, Hex.encode(SHA256.hash(seal.message)))
            XCTAssertEqual(row.1, row.2)
            XCTAssertTrue(row.3)
        }

        let next = try SigningKey.generate()
        let handover = try Sealer(key: sealed.key).handOver(on: sealed.db) { try next.publicKey }
        let rows = try sealed.db.query(blocks[3]).decode((Int64, String, String, String).self)
        XCTAssertEqual(rows.map(\.0), [3])
        XCTAssertEqual(Array(rows[0].1.utf8), handover.message(sealHash: sealed.seals[2].sealHash))
        XCTAssertTrue(try sealed.key.publicKey.isValidSignature(handover.signature, for: Array(rows[0].1.utf8)))
        XCTAssertEqual(try VerifyingKey(pem: rows[0].2).raw, try next.publicKey.raw)
        XCTAssertEqual(rows[0].3, try next.publicKey.fingerprint)
    }
}
