import Crypto
import Foundation
import Postgres

/// A seal of audit.seals: a contiguous range of the log in committed order, its Merkle root,
/// the previous seal's hash and the signature.
public struct Seal: Sendable {
    public var id: Int64
    public var after: LogPoint
    public var through: LogPoint
    public var eventCount: Int64
    public var merkleRoot: [UInt8]
    public var previousHash: [UInt8]
    /// Microseconds since 1970 (UTC).
    public var sealedAt: Int64
    public var keyFingerprint: String
    public var sealHash: [UInt8]
    public var signature: [UInt8]

    public static let genesisHash = [UInt8](repeating: 0, count: 32)

    /// The signed message: every field but the hash and the signature, one per line.
    public var message: [UInt8] {
        Array("""
            permaudit-seal-v1
            seal_id=\(id)
            after=\(after.sealNotation)
            through=\(through.sealNotation)
            event_count=\(eventCount)
            merkle_root=\(Hex.encode(merkleRoot))
            previous_hash=\(Hex.encode(previousHash))
            sealed_at=\(sealedAt)
            key=\(keyFingerprint)
            """.utf8)
    }

    /// Reads the seals (without their leaves), in chain order.
    public static func all(_ db: Connection) throws -> [Seal] {
        try db.query("""
            select seal_id, after_transaction_id::text, after_position, to_transaction_id::text, to_position, event_count,
                   encode(merkle_root, 'hex'), encode(previous_hash, 'hex'), (extract(epoch from sealed_at) * 1000000)::bigint,
                   key_fingerprint, encode(seal_hash, 'hex'), encode(signature, 'hex')
              from audit.seals order by seal_id
            """).decode((Int64, UInt64, Int64, UInt64, Int64, Int64, String, String, Int64, String, String, String).self).map { row in
            Seal(id: row.0, after: LogPoint(transactionId: row.1, position: row.2), through: LogPoint(transactionId: row.3, position: row.4),
                 eventCount: row.5, merkleRoot: Hex.decode(row.6) ?? [], previousHash: Hex.decode(row.7) ?? [], sealedAt: row.8,
                 keyFingerprint: row.9, sealHash: Hex.decode(row.10) ?? [], signature: Hex.decode(row.11) ?? [])
        }
    }

    /// The seal's stored leaves, or nil when they cannot be read as leaves.
    public static func leaves(_ db: Connection, sealId: Int64) throws -> [SealedLeaf]? {
        let hex: String = try db.query("select encode(leaves, 'hex') from audit.seals where seal_id = $1", [sealId]).scalar()
        return Hex.decode(hex).flatMap(SealedLeaf.decode)
    }
}

/// `permaudit audit seal`: seals everything committed so far that no seal covers yet.
public struct Sealer {
    public let key: SigningKey
    /// At most this many events per seal (a long unsealed stretch becomes several seals).
    public var maxEventsPerSeal = 100_000

    public init(key: SigningKey) { self.key = key }

    /// The chain's last seal and the fingerprint of the key that signed it; nil while nothing is
    /// sealed. Only that key may extend the chain (`sealNext`).
    public static func chainHead(_ db: Connection) throws -> (id: Int64, keyFingerprint: String)? {
        try db.query("select seal_id, key_fingerprint from audit.seals order by seal_id desc limit 1")
            .decode((Int64, String).self).first.map { (id: $0.0, keyFingerprint: $0.1) }
    }

    /// Adds seals until the committed log is covered, each in its own transaction; returns the
    /// new seals, and hands each to `committed` as soon as it is (the seals before an error stay).
    @discardableResult
    public func seal(_ db: Connection, committed: (Seal) -> Void = { _ in }) throws -> [Seal] {
        var sealed: [Seal] = []
        while let seal = try sealNext(db) {
            sealed.append(seal)
            committed(seal)
        }
        return sealed
    }

    /// One seal over the next at most `maxEventsPerSeal` committed events, in one transaction;
    /// nil when there is nothing new.
    func sealNext(_ db: Connection) throws -> Seal? {
        let fingerprint = try key.publicKey.fingerprint
        return try db.transaction {
            try db.query("select pg_advisory_xact_lock(hashtext('permaudit.seal'))")
            let head = try db.query("""
                select seal_id, to_transaction_id::text, to_position, encode(seal_hash, 'hex'), key_fingerprint
                  from audit.seals order by seal_id desc limit 1
                """).decode((Int64, UInt64, Int64, String, String).self).first
            // verify checks the whole chain against one public key: a seal signed by another key
            // would make it report tampering at every later seal.
            if let head, head.4 != fingerprint {
                throw ComplianceError("""
                    seal \(head.0), the last of the chain, was signed by key \(head.4.prefix(16))..., not by this key \
                    (\(fingerprint.prefix(16))...): seal with the key that signed the chain (restore it from its backup)
                    """)
            }
            let after = head.map { LogPoint(transactionId: $0.1, position: $0.2) } ?? .start
            // The end: the last of the next events below the oldest running transaction (all
            // committed; no later commit can fall before it).
            guard let through = try db.query("""
                select e.transaction_id::text, e.position from (
                    select e.transaction_id, e.position from audit.events e
                     where (e.transaction_id, e.position) > ($1::xid8, $2::bigint)
                       and e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
                     order by e.transaction_id, e.position limit $3) e
                 order by e.transaction_id desc, e.position desc limit 1
                """, [String(after.transactionId), after.position, maxEventsPerSeal])
                .decode((UInt64, Int64).self).first.map({ LogPoint(transactionId: $0.0, position: $0.1) }) else { return nil }

            var leaves: [SealedLeaf] = []
            try EventHashes.forEachEvent(db, after: after, through: through) { point, id, canonical in
                leaves.append(SealedLeaf(position: point.position, eventId: id, hash: EventHashes.leafHash(canonical: canonical)))
            }
            let sealedAt: Int64 = try db.query("select (extract(epoch from now()) * 1000000)::bigint").scalar()
            var seal = Seal(id: (head?.0 ?? 0) + 1, after: after, through: through, eventCount: Int64(leaves.count),
                            merkleRoot: Merkle.root(leaves.map(\.hash)), previousHash: head.flatMap { Hex.decode($0.3) } ?? Seal.genesisHash,
                            sealedAt: sealedAt, keyFingerprint: fingerprint, sealHash: [], signature: [])
            seal.sealHash = SHA256.hash(seal.message)
            seal.signature = try key.sign(seal.message)
            try db.query("""
                select audit.add_seal($1, $2::xid8, $3, $4::xid8, $5, $6, decode($7, 'hex'), decode($8, 'hex'), decode($9, 'hex'),
                                      timestamptz 'epoch' + $10::bigint * interval '1 microsecond', $11, decode($12, 'hex'), decode($13, 'hex'))
                """, [seal.id, String(after.transactionId), after.position, String(through.transactionId), through.position,
                      seal.eventCount, Hex.encode(seal.merkleRoot), Hex.encode(SealedLeaf.encode(leaves)), Hex.encode(seal.previousHash),
                      seal.sealedAt, seal.keyFingerprint, Hex.encode(seal.sealHash), Hex.encode(seal.signature)])
            return seal
        }
    }
}
