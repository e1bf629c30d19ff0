import Crypto
import Foundation

/// Where the seal key pair lives: `$PERMAUDIT_HOME/keys/` by default, the private key mode 0600.
public struct KeyStore {
    public let directory: URL
    public var privateKeyURL: URL { directory.appendingPathComponent("seal-ed25519.pem") }
    public var publicKeyURL: URL { directory.appendingPathComponent("seal-ed25519.pub.pem") }

    public init(directory: URL) { self.directory = directory }

    /// Writes a new key pair; refuses to replace an existing private key. The public key is
    /// written first and the private key appears whole, by a rename: where the private key file
    /// exists, the pair is complete (a keygen killed half-way is run again).
    public func generate() throws -> VerifyingKey {
        guard !FileManager.default.fileExists(atPath: privateKeyURL.path) else {
            throw ComplianceError("\(privateKeyURL.path) exists; a new key would orphan the seals it signed (move it away first)")
        }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let key = try SigningKey.generate()
        let publicKey = try key.publicKey
        try Data(try publicKey.pem().utf8).write(to: publicKeyURL, options: .atomic)
        let partial = directory.appendingPathComponent(".seal-ed25519.pem.partial")
        try? FileManager.default.removeItem(at: partial)
        guard FileManager.default.createFile(atPath: partial.path, contents: Data(try key.pem().utf8), attributes: [.posixPermissions: 0o600]),
              rename(partial.path, privateKeyURL.path) == 0 else {
            throw ComplianceError("cannot write \(privateKeyURL.path)")
        }
        return publicKey
    }

    public static func signingKey(at url: URL) throws -> SigningKey {
        guard let text = try? String(contentsOf: url, encoding: .utf8) else {
            throw ComplianceError("\(url.path): cannot read the private key (run 'permaudit audit keygen')")
        }
        return try SigningKey(pem: text)
    }

    public static func verifyingKey(at url: URL) throws -> VerifyingKey {
        guard let text = try? String(contentsOf: url, encoding: .utf8) else {
            throw ComplianceError("\(url.path): cannot read the public key")
        }
        return try VerifyingKey(pem: text)
    }
}
