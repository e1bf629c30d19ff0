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

/// A change of the seal key (046): after seal `afterSealId`, the key that signed it hands the
/// chain over to `toPublicKey`, which signs the seals after it.
public struct KeyHandover: Sendable {
    public var afterSealId: Int64
    public var fromKeyFingerprint: String
    /// The next key's raw Ed25519 public key (32 bytes).
    public var toPublicKey: [UInt8]
    /// Microseconds since 1970 (UTC).
    public var handedOverAt: Int64
    public var signature: [UInt8]

    /// The signed message, bound to the hash of the seal it follows.
    public func message(sealHash: [UInt8]) -> [UInt8] {
        Array("""
            permaudit-key-handover-v1
            after_seal=\(afterSealId)
            seal_hash=\(Hex.encode(sealHash))
            from_key=\(fromKeyFingerprint)
            to_key=\(Hex.encode(toPublicKey))
            handed_over_at=\(handedOverAt)
            """.utf8)
    }

    /// The handovers, by the seal each follows.
    public static func all(_ db: Connection) throws -> [Int64: KeyHandover] {
        let rows = try db.query("""
            select after_seal_id, from_key_fingerprint, encode(to_public_key, 'hex'),
                   (extract(epoch from handed_over_at) * 1000000)::bigint, encode(signature, 'hex')
              from audit.key_handovers order by after_seal_id
            """).decode((Int64, String, String, Int64, String).self)
        // One per seal (the primary key), unless a superuser dropped it: the first then counts.
        return Dictionary(rows.map { row in
            (row.0, KeyHandover(afterSealId: row.0, fromKeyFingerprint: row.1, toPublicKey: Hex.decode(row.2) ?? [],
                                handedOverAt: row.3, signature: Hex.decode(row.4) ?? []))
        }, uniquingKeysWith: { first, _ in first })
    }

    /// The next key's fingerprint.
    public var toKeyFingerprint: String { Hex.encode(SHA256.hash(toPublicKey)) }
}

/// The chain's last seal, with what decides which key signs the next one.
public struct ChainHead: Sendable {
    public var id: Int64
    public var through: LogPoint
    public var sealHash: [UInt8]
    /// The fingerprint of the key that signed the last seal.
    public var keyFingerprint: String
    /// The handover stored after the last seal, if any.
    public var handover: KeyHandover?
    /// The fingerprint of the key that signed the first seal.
    public var firstKeyFingerprint: String

    /// The chain's last seal; nil while nothing is sealed.
    public static func read(_ db: Connection) throws -> ChainHead? {
        try db.query("""
            select s.seal_id, s.to_transaction_id::text, s.to_position, encode(s.seal_hash, 'hex'), s.key_fingerprint,
                   h.from_key_fingerprint, encode(h.to_public_key, 'hex'), (extract(epoch from h.handed_over_at) * 1000000)::bigint,
                   encode(h.signature, 'hex'), (select f.key_fingerprint from audit.seals f order by f.seal_id limit 1)
              from audit.seals s left join audit.key_handovers h on h.after_seal_id = s.seal_id
             order by s.seal_id desc limit 1
            """).decode((Int64, UInt64, Int64, String, String, String?, String?, Int64?, String?, String).self).first.map { row in
            ChainHead(id: row.0, through: LogPoint(transactionId: row.1, position: row.2), sealHash: Hex.decode(row.3) ?? [],
                      keyFingerprint: row.4,
                      handover: row.5.map { from in
                          KeyHandover(afterSealId: row.0, fromKeyFingerprint: from, toPublicKey: Hex.decode(row.6 ?? "") ?? [],
                                      handedOverAt: row.7 ?? 0, signature: Hex.decode(row.8 ?? "") ?? [])
                      },
                      firstKeyFingerprint: row.9)
        }
    }

    /// The fingerprint of the key that signs the next seal, as `key` (a sealer's) sees it: the
    /// one the last seal's handover names, else the last seal's own. A handover after a seal of
    /// `key` that does not verify with it is none (a role that may add handovers could otherwise
    /// stop the sealing for good): `key` goes on, and verify reports the handover.
    public func nextKeyFingerprint(as key: VerifyingKey) -> String {
        guard let handover else { return keyFingerprint }
        if keyFingerprint == key.fingerprint, !key.isValidSignature(handover.signature, for: handover.message(sealHash: sealHash)) {
            return keyFingerprint
        }
        return handover.toKeyFingerprint
    }
}

/// `permaudit audit seal`: seals everything committed so far that no seal covers yet.
public struct Sealer {
    public let key: SigningKey
    /// At most this many events per seal (a long unsealed stretch becomes several seals).
    public var maxEventsPerSeal = 100_000

    public init(key: SigningKey) { self.key = key }

    /// Hands the chain over after its last seal (046) to the key `next` gives (called once the
    /// chain is known to be this key's), signed by this key; returns the handover.
    @discardableResult
    public func handOver(on db: Connection, to next: () throws -> VerifyingKey) throws -> KeyHandover {
        let publicKey = try key.publicKey
        return try db.transaction {
            try db.query("select pg_advisory_xact_lock(hashtext('permaudit.seal'))")
            guard let head = try ChainHead.read(db) else {
                throw ComplianceError("nothing is sealed yet: there is no chain to hand over")
            }
            if let stored = head.handover {
                throw ComplianceError("the chain was handed over after seal \(head.id) already, to key \(stored.toKeyFingerprint.prefix(16))...: seal with the chain's key before it hands over again")
            }
            guard head.keyFingerprint == publicKey.fingerprint else {
                throw ComplianceError("seal \(head.id), the last of the chain, was signed by key \(head.keyFingerprint.prefix(16))..., not by this key (\(publicKey.fingerprint.prefix(16))...): only the chain's key can hand it over")
            }
            let now: Int64 = try db.query("select (extract(epoch from now()) * 1000000)::bigint").scalar()
            var handover = KeyHandover(afterSealId: head.id, fromKeyFingerprint: publicKey.fingerprint, toPublicKey: try next().raw,
                                       handedOverAt: now, signature: [])
            handover.signature = try key.sign(handover.message(sealHash: head.sealHash))
            try db.query("""
                select audit.add_key_handover($1, $2, decode($3, 'hex'), timestamptz 'epoch' + $4::bigint * interval '1 microsecond', decode($5, 'hex'))
                """, [handover.afterSealId, handover.fromKeyFingerprint, Hex.encode(handover.toPublicKey), handover.handedOverAt,
                      Hex.encode(handover.signature)])
            return handover
        }
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
        let publicKey = try key.publicKey
        let fingerprint = publicKey.fingerprint
        return try db.transaction {
            try db.query("select pg_advisory_xact_lock(hashtext('permaudit.seal'))")
            let head = try ChainHead.read(db)
            // verify checks each seal against the chain's key at that seal: a seal signed by
            // another key would make it report tampering at every later seal.
            if let head, head.nextKeyFingerprint(as: publicKey) != fingerprint {
                throw ComplianceError(head.handover.map { handover in """
                    seal \(head.id), the last of the chain, handed the chain over to key \(handover.toKeyFingerprint.prefix(16))..., \
                    not to this key (\(fingerprint.prefix(16))...): seal with that key
                    """ } ?? """
                    seal \(head.id), the last of the chain, was signed by key \(head.keyFingerprint.prefix(16))..., not by this key \
                    (\(fingerprint.prefix(16))...): seal with the key that signed the chain (restore it from its backup)
                    """)
            }
            let after = head?.through ?? .start
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
            var seal = Seal(id: (head?.id ?? 0) + 1, after: after, through: through, eventCount: Int64(leaves.count),
                            merkleRoot: Merkle.root(leaves.map(\.hash)), previousHash: head?.sealHash ?? Seal.genesisHash,
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
