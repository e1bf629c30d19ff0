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
        XCTAssertEqual(blocks.count, 3)
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
    }
}
