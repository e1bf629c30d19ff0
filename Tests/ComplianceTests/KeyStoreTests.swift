import Compliance
import Foundation
import TestSupport
import XCTest

final class KeyStoreTests: XCTestCase {
    /// Keygens at once make one pair: one of them writes it, the others find the private key
    /// there, and the public key on disk is the private key's, with nothing half-written beside.
    func testKeygensAtOnceMakeOnePair() throws {
        for round in 0..<20 {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keystore-\(UUID().uuidString)/keys")
            defer { try? FileManager.default.removeItem(at: directory.deletingLastPathComponent()) }
            let waits = (0..<4).map { _ in Concurrently.inBackground { try KeyStore(directory: directory).generate().pem() } }
            let made = waits.map { $0() }.compactMap { try? $0.get() }
            XCTAssertEqual(made.count, 1, "round \(round)")
            let store = KeyStore(directory: directory)
            let publicKey = try String(contentsOf: store.publicKeyURL, encoding: .utf8)
            XCTAssertEqual(made.first, publicKey, "round \(round)")
            XCTAssertEqual(try KeyStore.signingKey(at: store.privateKeyURL).publicKey.pem(), publicKey, "round \(round)")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted(),
                           ["seal-ed25519.pem", "seal-ed25519.pub.pem"], "round \(round)")
        }
    }
}
