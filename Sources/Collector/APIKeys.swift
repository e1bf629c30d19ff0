import Foundation
import Postgres

/// The collector's API keys (migration 012): one app per key, only the key's SHA-256 stored.
///
///     let (id, key) = try APIKeys.create(app: "com.example.snap", on: db)   // show `key` once
///     try APIKeys.verify(key, on: db)   // "com.example.snap", or nil when unknown or revoked
public enum APIKeys {
    public struct Key: Sendable {
        public var id: Int64
        public var app: String
        public var createdAt: Date
        public var revokedAt: Date?
    }

    /// Creates a key for `app`; the returned key text is not stored anywhere.
    public static func create(app: String, on db: Connection) throws -> (id: Int64, key: String) {
        let row = try db.query("select id, key from collector.create_key($1)", [app]).decode((Int64, String).self)
        return (row[0].0, row[0].1)
    }

    public static func list(on db: Connection) throws -> [Key] {
        try db.query("select id, app, created_at, revoked_at from collector.api_keys order by id")
            .decode((Int64, String, Date, Date?).self)
            .map { Key(id: $0.0, app: $0.1, createdAt: $0.2, revokedAt: $0.3) }
    }

    /// Revokes a key by id; false when there is no active key with that id.
    public static func revoke(id: Int64, on db: Connection) throws -> Bool {
        let revoked: Bool? = try db.query("select collector.revoke_key($1)", [id]).scalar()
        return revoked ?? false
    }

    /// The app of a known, unrevoked key, else nil.
    public static func verify(_ key: String, on db: Connection) throws -> String? {
        try db.query("select collector.verify_key($1)", [key]).scalar()
    }
}
