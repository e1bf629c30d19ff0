import Crypto
import Foundation
import Postgres

/// `permaudit audit verify`: recomputes every seal's chain link, hash and signature, and every
/// sealed event's leaf hash from the log, and says what differs and where.
public struct Verifier {
    public let publicKey: VerifyingKey
    public init(publicKey: VerifyingKey) { self.publicKey = publicKey }

    public struct Failure: Sendable, Equatable, CustomStringConvertible {
        public enum Kind: String, Sendable {
            case modified, deleted, inserted, reordered
            case brokenChain = "broken chain"
            case badSignature = "bad signature"
            case alteredSeal = "altered seal"
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
        public var eventsValid = 0
        public var eventsChecked = 0
        public var failures: [Failure] = []
        /// Events committed after the last seal (not yet sealed): how many, the first position.
        public var unsealed = 0
        public var firstUnsealed: Int64?
        public var intact: Bool { failures.isEmpty }

        public var lines: [String] {
            func range(_ r: ClosedRange<Int64>?) -> String { r.map { "positions \($0.lowerBound)...\($0.upperBound)" } ?? "all" }
            var out = ["range requested: \(range(requested))", "range found: \(found.map { range($0) } ?? "no sealed events")",
                       "seals valid: \(sealsValid)/\(sealsChecked)", "events valid: \(eventsValid)/\(eventsChecked)"]
            out += failures.map { "FAIL \($0)" }
            if unsealed > 0 {
                out.append("unsealed tail: \(unsealed) events from position \(firstUnsealed ?? 0) are not sealed yet (run 'permaudit audit seal')")
            }
            out.append(intact ? "result: intact" : "result: TAMPERED (\(failures.count) failures)")
            return out
        }
    }

    /// Verifies the seals whose events touch `positions` (all when nil); the chain and the
    /// signatures of all seals are always checked. Runs in one read-only snapshot.
    public func verify(_ db: Connection, positions: ClosedRange<Int64>? = nil) throws -> Result {
        try db.execute("begin transaction isolation level repeatable read read only")
        defer { _ = try? db.execute("rollback") }
        var result = Result(requested: positions)
        let seals = try Seal.all(db)
        var previous = Seal.genesisHash
        var previousEnd = LogPoint.start
        for seal in seals {
            var sealFailures: [Failure] = []
            let leaves = try Seal.leaves(db, sealId: seal.id)
            // Seal-level failures name the seal's first sealed position (as far as it can be read).
            let first = leaves?.first?.position
            if seal.previousHash != previous || seal.after != previousEnd {
                sealFailures.append(Failure(kind: .brokenChain, sealId: seal.id, position: first,
                                            detail: seal.previousHash != previous ? "previous_hash is not the hash of seal \(seal.id - 1)"
                                                                                  : "range does not start where seal \(seal.id - 1) ends"))
            }
            if seal.sealHash != SHA256.hash(seal.message) {
                sealFailures.append(Failure(kind: .alteredSeal, sealId: seal.id, position: first, detail: "seal_hash does not match its fields"))
            }
            if seal.keyFingerprint != publicKey.fingerprint || !publicKey.isValidSignature(seal.signature, for: seal.message) {
                sealFailures.append(Failure(kind: .badSignature, sealId: seal.id, position: first,
                                            detail: seal.keyFingerprint != publicKey.fingerprint
                                                ? "signed by another key (\(seal.keyFingerprint.prefix(16))...)" : "the signature does not verify"))
            }
            // Chain on the hash as stored, so that one altered seal is reported once.
            previous = seal.sealHash
            previousEnd = seal.through

            if let positions, let leaves, !leaves.contains(where: { positions.contains($0.position) }) {
                result.failures += sealFailures
                if sealFailures.isEmpty { result.sealsValid += 1 }
                result.sealsChecked += 1
                continue
            }
            guard let leaves, leaves.count == seal.eventCount, Merkle.root(leaves.map(\.hash)) == seal.merkleRoot else {
                sealFailures.append(Failure(kind: .alteredSeal, sealId: seal.id, position: first,
                                            detail: "the stored leaves do not give the signed Merkle root"))
                result.failures += sealFailures
                result.sealsChecked += 1
                result.eventsChecked += Int(seal.eventCount)
                continue
            }
            var actual: [SealedLeaf] = []
            try EventHashes.forEachLeaf(db, after: seal.after, through: seal.through) { point, id, hash in
                actual.append(SealedLeaf(position: point.position, eventId: id, hash: hash))
            }
            let (valid, failure) = Self.compare(sealed: leaves, actual: actual, sealId: seal.id)
            if let failure { sealFailures.append(failure) }
            result.eventsValid += valid
            result.eventsChecked += leaves.count
            let low = leaves.map(\.position).min()!, high = leaves.map(\.position).max()!
            result.found = result.found.map { min($0.lowerBound, low)...max($0.upperBound, high) } ?? low...high
            result.failures += sealFailures
            if sealFailures.isEmpty { result.sealsValid += 1 }
            result.sealsChecked += 1
        }
        let tail = try db.query("""
            select count(*)::bigint, min(e.position) from audit.events e where (e.transaction_id, e.position) > ($1::xid8, $2::bigint)
            """, [String(previousEnd.transactionId), previousEnd.position]).decode((Int, Int64?).self)[0]
        result.unsealed = tail.0
        result.firstUnsealed = tail.1
        return result
    }

    /// How many sealed events are intact, and the first difference between what was sealed and
    /// what the log holds now, with its kind.
    static func compare(sealed: [SealedLeaf], actual: [SealedLeaf], sealId: Int64) -> (Int, Failure?) {
        let now = Dictionary(actual.map { ($0.eventId, $0) }, uniquingKeysWith: { first, _ in first })
        let valid = sealed.filter { now[$0.eventId] == $0 }.count
        guard sealed != actual else { return (valid, nil) }
        let k = (0..<min(sealed.count, actual.count)).first { sealed[$0] != actual[$0] } ?? min(sealed.count, actual.count)
        let sealedIds = Set(sealed.map(\.eventId))
        let failure: Failure
        if k < sealed.count && k < actual.count && sealed[k].eventId == actual[k].eventId {
            failure = Failure(kind: .modified, sealId: sealId, position: sealed[k].position,
                              detail: "event \(sealed[k].eventId.uuidString.lowercased()) differs from what was sealed")
        } else if k < sealed.count && now[sealed[k].eventId] == nil {
            failure = Failure(kind: .deleted, sealId: sealId, position: sealed[k].position,
                              detail: "\(sealed.filter { now[$0.eventId] == nil }.count) sealed events are missing")
        } else if k < actual.count && !sealedIds.contains(actual[k].eventId) {
            failure = Failure(kind: .inserted, sealId: sealId, position: actual[k].position,
                              detail: "\(actual.filter { !sealedIds.contains($0.eventId) }.count) events in the sealed range were not sealed")
        } else {
            failure = Failure(kind: .reordered, sealId: sealId, position: k < actual.count ? actual[k].position : sealed[k].position,
                              detail: "the sealed events are in another order or at other positions")
        }
        return (valid, failure)
    }
}
