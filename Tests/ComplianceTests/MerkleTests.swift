import Compliance
import Crypto
import XCTest

final class MerkleTests: XCTestCase {
    /// The RFC 6962 test vectors of Certificate Transparency's reference implementation.
    static let data: [[UInt8]] = [[], [0x00], [0x10], [0x20, 0x21], [0x30, 0x31], [0x40, 0x41, 0x42, 0x43],
                                  Array(0x50...0x57), Array(0x60...0x6f)]
    static let roots = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]

    func testRootsMatchTheRFC6962Vectors() {
        XCTAssertEqual(Hex.encode(Merkle.root([])), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        for size in 1...8 {
            XCTAssertEqual(Hex.encode(Merkle.root(Self.data.prefix(size).map(Merkle.leafHash))), Self.roots[size - 1], "size \(size)")
        }
    }

    func testEveryAuditPathLeadsToTheRootAndNoWrongOneDoes() {
        for size in 1...33 {
            let leaves = (0..<size).map { Merkle.leafHash([UInt8(truncatingIfNeeded: $0), 7]) }
            let root = Merkle.root(leaves)
            for index in 0..<size {
                let path = Merkle.auditPath(index, leaves[...])
                XCTAssertEqual(Merkle.rootFromPath(leaf: leaves[index], index: index, size: size, path: path), root, "\(index)/\(size)")
                if size > 1 {
                    XCTAssertNotEqual(Merkle.rootFromPath(leaf: leaves[(index + 1) % size], index: index, size: size, path: path), root)
                    XCTAssertNil(Merkle.rootFromPath(leaf: leaves[index], index: index, size: size, path: path + [root]))
                }
            }
        }
    }

    func testSignaturesVerifyOnlyForTheirMessageAndKey() throws {
        let key = try SigningKey.generate()
        let other = try SigningKey.generate()
        let message = Array("permaudit-seal-v1".utf8)
        let signature = try key.sign(message)
        XCTAssertEqual(signature.count, 64)
        XCTAssertTrue(try key.publicKey.isValidSignature(signature, for: message))
        XCTAssertFalse(try key.publicKey.isValidSignature(signature, for: message + [0x0A]))
        XCTAssertFalse(try other.publicKey.isValidSignature(signature, for: message))
        // PEM round trips.
        let reread = try SigningKey(pem: try key.pem())
        XCTAssertEqual(try reread.publicKey.raw, try key.publicKey.raw)
        XCTAssertEqual(try VerifyingKey(pem: try key.publicKey.pem()).raw, try key.publicKey.raw)
        XCTAssertThrowsError(try VerifyingKey(pem: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
    }
}
