import Compliance
import Crypto
import EventLog
import Foundation
import Postgres
import TestSupport

/// A database with `count` random events sealed in seals of at most `perSeal` events.
struct SealedDatabase {
    let url: String
    let db: Connection
    let key: SigningKey
    let seals: [Seal]

    init(events count: Int = 300, perSeal: Int = 100, seed: UInt64 = 3) throws {
        url = try TestDatabase.create()
        db = try Connection(url: url)
        var random = RandomEvents(seed: seed)
        try TestDatabase.append(Array(random.events(attempts: count, subjects: 40).prefix(count)), to: db, chunk: 70)
        key = try SigningKey.generate()
        var sealer = Sealer(key: key)
        sealer.maxEventsPerSeal = perSeal
        seals = try sealer.seal(db)
    }

    func verify(_ positions: ClosedRange<Int64>? = nil) throws -> Verifier.Result {
        try Verifier(publicKey: try key.publicKey).verify(url: url, positions: positions)
    }

    /// Runs `sql` as the superuser with the log's triggers off: what an attacker with full
    /// access to the server could do.
    func tamper(_ sql: String) throws {
        try db.execute("""
            begin;
            alter table audit.events disable trigger user;
            alter table audit.seals disable trigger user;
            alter table audit.key_handovers disable trigger user;
            \(sql);
            commit;
            """)
    }

    func drop() { TestDatabase.drop(url) }
}
