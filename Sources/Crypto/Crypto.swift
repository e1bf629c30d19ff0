import CCrypto
import Foundation

/// A failure of libcrypto, with OpenSSL's reason where it gives one.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ what: String) {
        let code = ERR_get_error()
        var reason = ""
        if code != 0, let text = ERR_reason_error_string(code) { reason = ": " + String(cString: text) }
        description = what + reason
    }
}

/// SHA-256 (FIPS 180-4) through libcrypto.
public enum SHA256 {
    public static let size = 32

    public static func hash(_ bytes: some ContiguousBytes) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeBytes { input in
            digest.withUnsafeMutableBufferPointer { out in
                _ = CCrypto.SHA256(input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count, out.baseAddress)
            }
        }
        return digest
    }

    /// The hash of `prefix` followed by `bytes` (RFC 6962 leaf and node hashing).
    public static func hash(prefix: UInt8, _ parts: [UInt8]...) -> [UInt8] {
        var input: [UInt8] = [prefix]
        for part in parts { input += part }
        return hash(input)
    }
}

/// An Ed25519 key pair (RFC 8032): the one owner of its EVP_PKEY handle.
public final class SigningKey: @unchecked Sendable {
    // Immutable after init; EVP_PKEY is safe to use from several threads for signing.
    fileprivate let key: OpaquePointer

    private init(key: OpaquePointer) { self.key = key }
    deinit { EVP_PKEY_free(key) }

    /// A new random key pair.
    public static func generate() throws -> SigningKey {
        guard let context = EVP_PKEY_CTX_new_id(permaudit_EVP_PKEY_ED25519, nil) else { throw CryptoError("cannot create a key context") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_keygen(context, &key) == 1, let key else {
            throw CryptoError("cannot generate an Ed25519 key")
        }
        return SigningKey(key: key)
    }

    /// Reads a private key in PEM (PKCS #8), as `pem` writes it.
    public init(pem: String) throws {
        let key = try withMemoryBIO(pem) { PEM_read_bio_PrivateKey($0, nil, nil, nil) }
        guard let key, EVP_PKEY_get_id(key) == permaudit_EVP_PKEY_ED25519 else {
            if let key { EVP_PKEY_free(key) }
            throw CryptoError("not an Ed25519 private key in PEM")
        }
        self.key = key
    }

    /// The private key in PEM (PKCS #8, unencrypted: protect the file).
    public func pem() throws -> String {
        try writeMemoryBIO { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) == 1 }
    }

    public var publicKey: VerifyingKey {
        get throws {
            var raw = [UInt8](repeating: 0, count: 32)
            var length = raw.count
            guard EVP_PKEY_get_raw_public_key(key, &raw, &length) == 1 else { throw CryptoError("cannot read the public key") }
            return try VerifyingKey(raw: raw)
        }
    }

    /// The Ed25519 signature (64 bytes) of `message`.
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError("cannot create a signing context") }
        defer { EVP_MD_CTX_free(context) }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = signature.count
        guard EVP_DigestSignInit(context, nil, nil, nil, key) == 1,
              EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else {
            throw CryptoError("cannot sign")
        }
        return Array(signature.prefix(length))
    }
}

/// An Ed25519 public key: the one owner of its EVP_PKEY handle.
public final class VerifyingKey: @unchecked Sendable {
    fileprivate let key: OpaquePointer

    public init(raw: [UInt8]) throws {
        guard raw.count == 32, let key = EVP_PKEY_new_raw_public_key(permaudit_EVP_PKEY_ED25519, nil, raw, raw.count) else {
            throw CryptoError("not an Ed25519 public key")
        }
        self.key = key
    }

    /// Reads a public key in PEM (SubjectPublicKeyInfo).
    public init(pem: String) throws {
        let key = try withMemoryBIO(pem) { PEM_read_bio_PUBKEY($0, nil, nil, nil) }
        guard let key, EVP_PKEY_get_id(key) == permaudit_EVP_PKEY_ED25519 else {
            if let key { EVP_PKEY_free(key) }
            throw CryptoError("not an Ed25519 public key in PEM")
        }
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    public func pem() throws -> String {
        try writeMemoryBIO { PEM_write_bio_PUBKEY($0, key) == 1 }
    }

    /// The 32 raw key bytes.
    public var raw: [UInt8] {
        var raw = [UInt8](repeating: 0, count: 32)
        var length = raw.count
        _ = EVP_PKEY_get_raw_public_key(key, &raw, &length)
        return raw
    }

    /// SHA-256 of the raw key, hex: names the key in seals.
    public var fingerprint: String { Hex.encode(SHA256.hash(raw)) }

    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        return EVP_DigestVerifyInit(context, nil, nil, nil, key) == 1
            && EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }
}

/// Lower-case hexadecimal.
public enum Hex {
    public static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: return c - 0x30
            case 0x61...0x66: return c - 0x61 + 10
            case 0x41...0x46: return c - 0x41 + 10
            default: return nil
            }
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let high = value(chars[i]), let low = value(chars[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
    }
}

private func withMemoryBIO<T>(_ text: String, _ body: (OpaquePointer) -> T) throws -> T {
    var bytes = Array(text.utf8)
    return try bytes.withUnsafeMutableBytes { buffer in
        guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { throw CryptoError("cannot read the key text") }
        defer { BIO_free(bio) }
        return body(bio)
    }
}

private func writeMemoryBIO(_ write: (OpaquePointer) -> Bool) throws -> String {
    guard let bio = BIO_new(BIO_s_mem()) else { throw CryptoError("cannot allocate a buffer") }
    defer { BIO_free(bio) }
    guard write(bio) else { throw CryptoError("cannot write the key") }
    var data: UnsafeMutablePointer<CChar>?
    let length = permaudit_BIO_get_mem_data(bio, &data)
    guard let data, length > 0 else { throw CryptoError("cannot write the key") }
    return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
}
