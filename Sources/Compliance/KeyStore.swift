import Crypto
import Foundation

/// Where the seal key pair lives: `$PERMAUDIT_HOME/keys/` by default, the private key mode 0600.
public struct KeyStore {
    public let directory: URL
    public var privateKeyURL: URL { directory.appendingPathComponent("seal-ed25519.pem") }
    public var publicKeyURL: URL { directory.appendingPathComponent("seal-ed25519.pub.pem") }

    public init(directory: URL) { self.directory = directory }

    /// Where `audit rotate-key` writes the next pair, until the chain is handed over to it.
    public var next: KeyStore { KeyStore(directory: directory.appendingPathComponent("next")) }
    /// The public keys that handed the chain over, named by their fingerprint (their private keys
    /// are destroyed).
    public var retiredDirectory: URL { directory.appendingPathComponent("retired") }
    /// The chain's first public key, kept by the first `rotate-key`: what `verify` trusts by
    /// default once the current key is another.
    public var firstPublicKeyURL: URL { directory.appendingPathComponent("seal-ed25519.first.pub.pem") }

    /// The retired public keys (those that can be read).
    public func retiredKeys() -> [VerifyingKey] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: retiredDirectory.path)) ?? []
        return names.filter { $0.hasSuffix(".pub.pem") }.sorted().compactMap {
            try? Self.verifyingKey(at: retiredDirectory.appendingPathComponent($0))
        }
    }

    /// Keeps `key` as the chain's first public key, unless one is kept already.
    public func keepFirstKey(_ key: VerifyingKey) throws {
        guard !FileManager.default.fileExists(atPath: firstPublicKeyURL.path) else { return }
        try write(Data(try key.pem().utf8), to: firstPublicKeyURL, mode: 0o644)
        try flush([directory])
    }

    /// After the chain was handed over to the next pair: the current public key moves to
    /// `retired/` (named by its fingerprint), and the next pair takes the current one's names,
    /// public key first; the rename over the current private key destroys it, and the directory
    /// always holds a private key. Each step is flushed with its directories; run again after a
    /// failure, it goes on where it stopped. Nothing to do without a next pair.
    public func promoteNext() throws {
        let next = self.next
        guard FileManager.default.fileExists(atPath: next.privateKeyURL.path) else { return }
        let directoryFD = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { throw failure("open \(directory.path)") }
        defer { close(directoryFD) }
        guard flock(directoryFD, LOCK_EX) == 0 else { throw failure("lock \(directory.path)") }
        // The public key is retired while it is still the current private key's (a step done
        // before left the next pair's public key in its place).
        if FileManager.default.fileExists(atPath: privateKeyURL.path), FileManager.default.fileExists(atPath: publicKeyURL.path) {
            let fingerprint = try Self.signingKey(at: privateKeyURL).publicKey.fingerprint
            if try Self.verifyingKey(at: publicKeyURL).fingerprint == fingerprint {
                if mkdir(retiredDirectory.path, 0o700) != 0 && errno != EEXIST { throw failure("create \(retiredDirectory.path)") }
                try move(publicKeyURL, to: retiredDirectory.appendingPathComponent("seal-ed25519-\(fingerprint.prefix(16)).pub.pem"),
                         flushing: [retiredDirectory, directory])
            }
        }
        try move(next.publicKeyURL, to: publicKeyURL, flushing: [directory, next.directory])
        try move(next.privateKeyURL, to: privateKeyURL, flushing: [directory, next.directory])
        rmdir(next.directory.path)
    }

    /// Renames `source` to `target` where `source` exists (a step done before is skipped), then
    /// flushes the directories.
    private func move(_ source: URL, to target: URL, flushing directories: [URL]) throws {
        guard FileManager.default.fileExists(atPath: source.path) else { return }
        guard rename(source.path, target.path) == 0 else { throw failure("rename \(source.path) to \(target.path)") }
        try flush(directories)
    }

    private func flush(_ directories: [URL]) throws {
        for directory in directories {
            let fd = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { throw failure("open \(directory.path)") }
            defer { close(fd) }
            guard fsync(fd) == 0 else { throw failure("flush \(directory.path)") }
        }
    }

    /// Writes a new key pair; refuses to replace an existing private key. The directory is locked
    /// (flock) while the pair is written, so that two keygens at once make one pair. The public
    /// key is written first and the private key appears whole, both flushed to disk: where the
    /// private key file exists, the pair is complete (a keygen killed or a machine stopped
    /// half-way is run again).
    public func generate() throws -> VerifyingKey {
        // Only the key directory itself is private: parents made here (a new $PERMAUDIT_HOME) keep
        // the usual mode, so that the embedded cluster's server user can still reach its home.
        try FileManager.default.createDirectory(at: directory.deletingLastPathComponent(), withIntermediateDirectories: true)
        if mkdir(directory.path, 0o700) != 0 && errno != EEXIST { throw failure("create \(directory.path)") }
        let directoryFD = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { throw failure("open \(directory.path)") }
        defer { close(directoryFD) }
        guard flock(directoryFD, LOCK_EX) == 0 else { throw failure("lock \(directory.path)") }
        guard !FileManager.default.fileExists(atPath: privateKeyURL.path) else {
            throw ComplianceError("\(privateKeyURL.path) exists; a new key would orphan the seals it signed (move it away first)")
        }
        let key = try SigningKey.generate()
        let publicKey = try key.publicKey
        // Each name flushed with the directory before the next: the private key's never stands
        // without the public key's, even after a stop of the machine.
        for (data, url, mode) in [(try publicKey.pem(), publicKeyURL, mode_t(0o644)), (try key.pem(), privateKeyURL, mode_t(0o600))] {
            try write(Data(data.utf8), to: url, mode: mode)
            guard fsync(directoryFD) == 0 else { throw failure("flush \(directory.path)") }
        }
        return publicKey
    }

    private func failure(_ step: String) -> ComplianceError {
        ComplianceError("cannot write the key pair: \(step) (\(String(cString: strerror(errno))))")
    }

    /// Writes `data` whole or not at all: into a file beside `url`, flushed, then renamed to it.
    private func write(_ data: Data, to url: URL, mode: mode_t) throws {
        let partial = directory.appendingPathComponent(".\(url.lastPathComponent).partial").path
        unlink(partial)
        let fd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw failure("create \(partial)") }
        defer { unlink(partial) }
        let written = data.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
        if written >= 0 && written < data.count { errno = ENOSPC }  // a short write: the disk is full
        guard written == data.count, fsync(fd) == 0 else { let error = failure("write \(partial)"); close(fd); throw error }
        close(fd)
        guard rename(partial, url.path) == 0 else { throw failure("rename \(partial) to \(url.path)") }
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
