import Crypto
import Foundation
import Postgres

/// `permaudit audit verify`: recomputes every seal's chain link, hash and signature, and every
/// sealed event's leaf hash from the log, and says what differs and where.
public struct Verifier {
    /// The chain's first key, the one trusted: it signs the seals up to the first key handover
    /// (046) it signed, then the key that handover names does, and so on.
    public let publicKey: VerifyingKey
    /// The key the chain must end with (its key after the last seal), when known: a key
    /// directory's current key. A chain that ends with another was handed over to a key this
    /// directory does not hold: rewritten with a retired key, or the directory is not the chain's.
    public let currentKey: VerifyingKey?
    /// Keys the chain must pass through: a key directory's retired ones. A chain that skips one
    /// was rewritten with an older key and handed over past it.
    public let retiredKeys: [VerifyingKey]

    public init(publicKey: VerifyingKey, currentKey: VerifyingKey? = nil, retiredKeys: [VerifyingKey] = []) {
        self.publicKey = publicKey
        self.currentKey = currentKey
        self.retiredKeys = retiredKeys
    }

    public struct Failure: Sendable, Equatable, CustomStringConvertible {
        public enum Kind: String, Sendable {
            case modified, deleted, inserted, reordered
            case brokenChain = "broken chain"
            case badSignature = "bad signature"
            case alteredSeal = "altered seal"
            case missingSeal = "missing seal"
            case badHandover = "bad key handover"
            case unexpectedKey = "unexpected key"
        }
        public var kind: Kind
        public var sealId: Int64
        /// The first position affected.
        public var position: Int64?
        public var detail: String
        public var description: String {
            "seal \(sealId): \(kind.rawValue)" + (position.map { " at position \($0)" } ?? "") + ": \(detail)"
        }
    }

    public struct Result: Sendable {
        /// The requested positions (inclusive), nil for "all".
        public var requested: ClosedRange<Int64>?
        /// The lowest and highest position of the sealed events checked.
        public var found: ClosedRange<Int64>?
        public var sealsValid = 0
        public var sealsChecked = 0
        /// Changes of the seal key (046) that verify, of those stored.
        public var handoversValid = 0
        public var handoversChecked = 0
        public var eventsValid = 0
        public var eventsChecked = 0
        public var failures: [Failure] = []
        /// Events committed after the last seal (not yet sealed): how many, the first position.
        public var unsealed = 0
        public var firstUnsealed: Int64?
        /// The newest seal's id and hash (hex): what to keep outside the database for `expectedSeal`
        /// (printed only when the chain is intact).
        public var newestSeal: (id: Int64, hash: String)?
        public var intact: Bool { failures.isEmpty }

        public var lines: [String] {
            func range(_ r: ClosedRange<Int64>?) -> String { r.map { "positions \($0.lowerBound)...\($0.upperBound)" } ?? "all" }
            var out = ["range requested: \(range(requested))", "range found: \(found.map { range($0) } ?? "no sealed events")",
                       "seals valid: \(sealsValid)/\(sealsChecked)", "events valid: \(eventsValid)/\(eventsChecked)"]
            if handoversChecked > 0 { out.append("key handovers valid: \(handoversValid)/\(handoversChecked)") }
            if let newestSeal, intact { out.append("newest seal: \(newestSeal.id), hash \(newestSeal.hash)") }
            out += failures.map { "FAIL \($0)" }
            if unsealed > 0 {
                out.append("unsealed tail: \(unsealed) events from position \(firstUnsealed ?? 0) are not sealed yet (run 'permaudit audit seal')")
            }
            out.append(!intact ? "result: TAMPERED (\(failures.count) failures)"
                       : sealsChecked == 0 ? "result: not verified (no seal)" : "result: intact")
            return out
        }

        /// `intact`, `tampered`, or `not verified` when there was no seal to verify against.
        public var verdict: String { !intact ? "tampered" : sealsChecked == 0 ? "not verified" : "intact" }
    }

    /// Verifies the seals whose events touch `positions` (all when nil); the chain and the
    /// signatures of all seals are always checked. `expectedSeal`, a seal hash kept outside the
    /// database, must be in the chain: deleting the newest seals leaves a chain intact in itself.
    /// `workers` connections share one read-only snapshot (exported by the first) and check the
    /// seals between them.
    public func verify(url: String, positions: ClosedRange<Int64>? = nil, expectedSeal: [UInt8]? = nil,
                       workers: Int = 2) throws -> Result {
        let db = try Connection(url: url)
        try db.execute("begin transaction isolation level repeatable read read only")
        defer { _ = try? db.execute("rollback") }
        let snapshot: String = try db.query("select pg_export_snapshot()").scalar()
        let seals = try Seal.all(db)
        var result = Result(requested: positions)
        let chain = Self.chainKeys(seals, handovers: try KeyHandover.all(db), first: publicKey)
        result.handoversChecked = chain.valid + chain.failures.count
        result.handoversValid = chain.valid

        let outcomes = Outcomes()
        DispatchQueue.concurrentPerform(iterations: max(1, min(workers, seals.count))) { worker in
            do {
                let connection = try Connection(url: url)
                try connection.execute("begin transaction isolation level repeatable read read only")
                try connection.query("set transaction snapshot '\(snapshot)'")
                for index in stride(from: worker, to: seals.count, by: max(1, min(workers, seals.count))) {
                    let outcome = try Self.check(seals[index], previous: index > 0 ? seals[index - 1] : nil, on: connection,
                                                 publicKey: chain.keys[index], positions: positions)
                    outcomes.set(index, outcome)
                }
                try connection.execute("rollback")
            } catch {
                outcomes.fail(error)
            }
        }
        if let error = outcomes.error { throw error }

        for index in seals.indices {
            guard let outcome = outcomes.get(index) else { continue }
            result.failures += outcome.failures + (chain.failures[seals[index].id].map { [$0] } ?? [])
            result.sealsChecked += 1
            if outcome.failures.isEmpty { result.sealsValid += 1 }
            result.eventsValid += outcome.eventsValid
            result.eventsChecked += outcome.eventsChecked
            if let found = outcome.found {
                result.found = result.found.map { min($0.lowerBound, found.lowerBound)...max($0.upperBound, found.upperBound) } ?? found
            }
        }
        if let newest = seals.last {
            result.newestSeal = (newest.id, Hex.encode(newest.sealHash))
            // The key directory's view: the chain leads to its current key, through its retired ones.
            if let currentKey, chain.last.fingerprint != currentKey.fingerprint {
                result.failures.append(Failure(kind: .unexpectedKey, sealId: newest.id, position: nil, detail: """
                    the chain's key after its last seal is \(chain.last.fingerprint.prefix(16))..., not the key directory's current key \
                    \(currentKey.fingerprint.prefix(16))...: handed over to a key this directory does not hold (history rewritten with a \
                    retired key, or the directory is not this chain's)
                    """))
            }
            let passed = Set(chain.keys.map(\.fingerprint) + [chain.last.fingerprint])
            for retired in retiredKeys where !passed.contains(retired.fingerprint) {
                result.failures.append(Failure(kind: .unexpectedKey, sealId: newest.id, position: nil, detail: """
                    the chain does not pass through the retired key \(retired.fingerprint.prefix(16))... of the key directory: \
                    handed over past it (history rewritten with an older key)
                    """))
            }
        }
        if let expectedSeal, !seals.contains(where: { $0.sealHash == expectedSeal }) {
            result.failures.append(Failure(kind: .missingSeal, sealId: seals.last?.id ?? 0, position: nil,
                                           detail: "no seal has the expected hash \(Hex.encode(expectedSeal).prefix(16))...; "
                                               + (seals.isEmpty ? "there are no seals" : "seals after this one may have been deleted")))
        }
        let end = seals.last?.through ?? .start
        let tail = try db.query("""
            select count(*)::bigint, min(e.position) from audit.events e where (e.transaction_id, e.position) > ($1::xid8, $2::bigint)
            """, [String(end.transactionId), end.position]).decode((Int, Int64?).self)[0]
        result.unsealed = tail.0
        result.firstUnsealed = tail.1
        return result
    }

    /// The key each seal must be signed by: the first key, then, after each handover it (or a key
    /// handed over to) signed, the key the handover names; and the key after the last seal. A
    /// handover that does not verify is a failure (by the seal it follows), and the key stays: the
    /// seals after it then fail as signed by another key.
    static func chainKeys(_ seals: [Seal], handovers: [Int64: KeyHandover], first: VerifyingKey)
        -> (keys: [VerifyingKey], last: VerifyingKey, failures: [Int64: Failure], valid: Int) {
        var key = first
        var keys: [VerifyingKey] = []
        var failures: [Int64: Failure] = [:]
        var valid = 0
        keys.reserveCapacity(seals.count)
        for seal in seals {
            keys.append(key)
            guard let handover = handovers[seal.id] else { continue }
            if handover.fromKeyFingerprint == key.fingerprint,
               key.isValidSignature(handover.signature, for: handover.message(sealHash: seal.sealHash)),
               let next = try? VerifyingKey(raw: handover.toPublicKey) {
                key = next
                valid += 1
            } else {
                failures[seal.id] = Failure(kind: .badHandover, sealId: seal.id, position: nil,
                                            detail: "the handover of the chain to key \(handover.toKeyFingerprint.prefix(16))... after this seal does not verify with the chain's key at this seal")
            }
        }
        return (keys, key, failures, valid)
    }

    /// What one seal's check found.
    struct SealOutcome: Sendable {
        var failures: [Failure] = []
        var eventsValid = 0
        var eventsChecked = 0
        var found: ClosedRange<Int64>?
    }

    /// One seal: its link to the previous seal, its hash and signature, its stored leaves against
    /// its root, and (when it holds positions of the range) every event against its leaf.
    static func check(_ seal: Seal, previous: Seal?, on db: Connection, publicKey: VerifyingKey,
                      positions: ClosedRange<Int64>?) throws -> SealOutcome {
        var outcome = SealOutcome()
        let leaves = try Seal.leaves(db, sealId: seal.id)
        // Seal-level failures name the seal's first sealed position (as far as it can be read).
        let first = leaves?.first?.position
        // The chain runs on the hashes as stored, so that one altered seal is reported once.
        if seal.previousHash != (previous?.sealHash ?? Seal.genesisHash) || seal.after != (previous?.through ?? .start) {
            outcome.failures.append(Failure(kind: .brokenChain, sealId: seal.id, position: first,
                                            detail: seal.previousHash != (previous?.sealHash ?? Seal.genesisHash)
                                                ? "previous_hash is not the hash of seal \(seal.id - 1)"
                                                : "range does not start where seal \(seal.id - 1) ends"))
        }
        if seal.sealHash != SHA256.hash(seal.message) {
            outcome.failures.append(Failure(kind: .alteredSeal, sealId: seal.id, position: first, detail: "seal_hash does not match its fields"))
        }
        if seal.keyFingerprint != publicKey.fingerprint || !publicKey.isValidSignature(seal.signature, for: seal.message) {
            outcome.failures.append(Failure(kind: .badSignature, sealId: seal.id, position: first,
                                            detail: seal.keyFingerprint != publicKey.fingerprint
                                                ? "signed by another key (\(seal.keyFingerprint.prefix(16))...) than the chain's key at this seal (\(publicKey.fingerprint.prefix(16))...)"
                                                : "the signature does not verify"))
        }
        // Out of the range when neither its stored leaves (whose positions are not signed) nor
        // the log's events in its signed range hold a position of it.
        if let positions, let leaves, !leaves.contains(where: { positions.contains($0.position) }) {
            let touched: Bool = try db.query("""
                select exists (select 1 from audit.events e
                                where e.position between $5 and $6
                                  and (e.transaction_id, e.position) > ($1::xid8, $2::bigint)
                                  and (e.transaction_id, e.position) <= ($3::xid8, $4::bigint))
                """, [String(seal.after.transactionId), seal.after.position, String(seal.through.transactionId), seal.through.position,
                      positions.lowerBound, positions.upperBound]).scalar()
            if !touched { return outcome }
        }
        outcome.eventsChecked = Int(seal.eventCount)
        guard let leaves, leaves.count == seal.eventCount, Merkle.root(leaves.map(\.hash)) == seal.merkleRoot else {
            outcome.failures.append(Failure(kind: .alteredSeal, sealId: seal.id, position: first,
                                            detail: "the stored leaves do not give the signed Merkle root"))
            return outcome
        }
        var actual: [SealedLeaf] = []
        actual.reserveCapacity(leaves.count)
        try EventHashes.forEachLeaf(db, after: seal.after, through: seal.through) { point, id, hash in
            actual.append(SealedLeaf(position: point.position, eventId: id, hash: hash))
        }
        let (valid, failure) = try compare(sealed: leaves, actual: actual, sealId: seal.id) { id in
            try db.query("select position from audit.events where event_id = $1::uuid", [id.uuidString]).decode(Int64.self).first
        }
        if let failure { outcome.failures.append(failure) }
        outcome.eventsValid = valid
        let sealedPositions = leaves.map(\.position)
        outcome.found = sealedPositions.min()!...sealedPositions.max()!
        return outcome
    }

    /// The workers' outcomes, by seal index.
    private final class Outcomes: @unchecked Sendable {
        // Touched only under the lock.
        private let lock = NSLock()
        private var outcomes: [Int: SealOutcome] = [:]
        private(set) var error: (any Error)?

        func set(_ index: Int, _ outcome: SealOutcome) { lock.withLock { outcomes[index] = outcome } }
        func get(_ index: Int) -> SealOutcome? { lock.withLock { outcomes[index] } }
        func fail(_ error: any Error) { lock.withLock { if self.error == nil { self.error = error } } }
    }

    /// How many sealed events are intact, and the first difference between what was sealed and
    /// what the log holds now, with its kind. `locate` gives the position of an event that is
    /// missing from the seal's range, if it is elsewhere in the log (moved, not deleted).
    static func compare(sealed: [SealedLeaf], actual: [SealedLeaf], sealId: Int64,
                        locate: (UUID) throws -> Int64?) rethrows -> (Int, Failure?) {
        let now = Dictionary(actual.map { ($0.eventId, $0) }, uniquingKeysWith: { first, _ in first })
        let valid = sealed.filter { now[$0.eventId] == $0 }.count
        guard sealed != actual else { return (valid, nil) }
        let k = (0..<min(sealed.count, actual.count)).first { sealed[$0] != actual[$0] } ?? min(sealed.count, actual.count)
        // A leaf hash covers its event's position and id: where every event hashes to the signed
        // leaf, the events are as sealed, and what differs is the position or id stored beside it.
        if sealed.map(\.hash) == actual.map(\.hash) {
            return (sealed.count, Failure(kind: .alteredSeal, sealId: sealId, position: actual[k].position,
                                          detail: "the positions or event ids stored with the leaf hashes were changed; the events are as sealed"))
        }
        let sealedIds = Set(sealed.map(\.eventId))
        func moved(_ leaf: SealedLeaf, to position: Int64, _ outside: Bool) -> Failure {
            let event = "event \(leaf.eventId.uuidString.lowercased())"
            return Failure(kind: .reordered, sealId: sealId, position: leaf.position, detail: position == leaf.position
                ? "\(event) at position \(position) is outside the seal's range in committed order (its transaction id changed)"
                : "\(event) sealed at position \(leaf.position) is at position \(position)" + (outside ? ", outside the seal's range" : ""))
        }
        let failure: Failure
        if k < sealed.count && k < actual.count && sealed[k].eventId == actual[k].eventId {
            failure = sealed[k].position == actual[k].position
                ? Failure(kind: .modified, sealId: sealId, position: sealed[k].position,
                          detail: "event \(sealed[k].eventId.uuidString.lowercased()) differs from what was sealed")
                : moved(sealed[k], to: actual[k].position, false)
        } else if k < sealed.count && k < actual.count && sealed[k].position == actual[k].position
                    && now[sealed[k].eventId] == nil && !sealedIds.contains(actual[k].eventId) {
            failure = Failure(kind: .modified, sealId: sealId, position: sealed[k].position,
                              detail: "the event at position \(sealed[k].position) has another id than the one sealed")
        } else if k < sealed.count && now[sealed[k].eventId] == nil {
            if let elsewhere = try locate(sealed[k].eventId) {
                failure = moved(sealed[k], to: elsewhere, true)
            } else {
                failure = Failure(kind: .deleted, sealId: sealId, position: sealed[k].position,
                                  detail: "\(sealed.filter { now[$0.eventId] == nil }.count) sealed events are missing from the seal's range")
            }
        } else if k < actual.count && !sealedIds.contains(actual[k].eventId) {
            failure = Failure(kind: .inserted, sealId: sealId, position: actual[k].position,
                              detail: "\(actual.filter { !sealedIds.contains($0.eventId) }.count) events in the sealed range were not sealed")
        } else {
            failure = Failure(kind: .reordered, sealId: sealId, position: k < sealed.count ? sealed[k].position : actual[k].position,
                              detail: "the sealed events are in another order or at other positions")
        }
        return (valid, failure)
    }
}
