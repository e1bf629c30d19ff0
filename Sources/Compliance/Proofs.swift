import Crypto
import Foundation
import PermissionEvents
import Postgres

/// An inclusion proof: an event's canonical form, its place in a seal's Merkle tree, the audit
/// path, and the signed seal, all that `check` needs, with no database.
public struct InclusionProof: Sendable {
    public var eventId: UUID
    public var position: Int64
    public var canonical: String
    public var leafIndex: Int
    public var path: [[UInt8]]
    public var seal: Seal

    /// The proof of `eventId` against the seal that covers it.
    public static func make(_ db: Connection, eventId: UUID) throws -> InclusionProof {
        guard let row = try db.query("""
            select e.position, e.transaction_id::text, \(EventHashes.canonicalSQL) from audit.events e where e.event_id = $1
            """, [eventId]).decode((Int64, UInt64, String).self).first else { throw ComplianceError("no event with id \(eventId.uuidString.lowercased()) in the log") }
        let point = LogPoint(transactionId: row.1, position: row.0)
        guard let seal = try Seal.all(db).first(where: { point > $0.after && point <= $0.through }) else {
            throw ComplianceError("the event at position \(row.0) is not sealed yet (run 'permaudit audit seal')")
        }
        guard let leaves = try Seal.leaves(db, sealId: seal.id), let index = leaves.firstIndex(where: { $0.eventId == eventId }) else {
            throw ComplianceError("seal \(seal.id) does not list the event: run 'permaudit audit verify'")
        }
        return InclusionProof(eventId: eventId, position: row.0, canonical: row.2, leafIndex: index,
                              path: Merkle.auditPath(index, leaves.map(\.hash)[...]), seal: seal)
    }

    /// Checks the proof offline: the event's leaf leads to the seal's root, the seal's hash
    /// matches its fields, and the signature verifies with `publicKey`. Throws the reason.
    public func check(publicKey: VerifyingKey) throws {
        guard seal.keyFingerprint == publicKey.fingerprint else { throw ComplianceError("the seal was signed by another key") }
        guard publicKey.isValidSignature(seal.signature, for: seal.message) else { throw ComplianceError("bad signature on seal \(seal.id)") }
        guard SHA256.hash(seal.message) == seal.sealHash else { throw ComplianceError("seal \(seal.id): seal_hash does not match its fields") }
        guard let root = Merkle.rootFromPath(leaf: EventHashes.leafHash(canonical: canonical), index: leafIndex,
                                              size: Int(seal.eventCount), path: path) else {
            throw ComplianceError("the audit path does not fit a tree of \(seal.eventCount) leaves")
        }
        guard root == seal.merkleRoot else { throw ComplianceError("the event does not lead to the seal's Merkle root") }
        // The canonical form (what the leaf hashes) is [position, transaction id, event id, ...]:
        // the proof's eventId and position must be the ones it holds, not only somewhere in it.
        guard case let .array(fields)? = try? JSONParser.parse(canonical, maxDepth: 24), fields.count > 2,
              fields[0] == .number(String(position)), fields[2] == .string(eventId.uuidString.lowercased()) else {
            throw ComplianceError("the canonical form is not that of the event and position the proof names")
        }
    }

    public var json: String {
        func q(_ s: String) -> String { var out = ""; JSONValue.writeQuoted(s, to: &out); return out }
        return """
            {"format":"permaudit.inclusion-proof","version":1,\
            "event":{"eventId":\(q(eventId.uuidString.lowercased())),"position":\(position),"canonical":\(q(canonical))},\
            "leafIndex":\(leafIndex),"path":[\(path.map { q(Hex.encode($0)) }.joined(separator: ","))],\
            "seal":{"sealId":\(seal.id),"after":\(q(seal.after.sealNotation)),"through":\(q(seal.through.sealNotation)),\
            "eventCount":\(seal.eventCount),"merkleRoot":\(q(Hex.encode(seal.merkleRoot))),\
            "previousHash":\(q(Hex.encode(seal.previousHash))),"sealedAt":\(seal.sealedAt),"keyFingerprint":\(q(seal.keyFingerprint)),\
            "sealHash":\(q(Hex.encode(seal.sealHash))),"signature":\(q(Hex.encode(seal.signature)))}}

            """
    }

    /// Reads a proof written by `json`.
    public init(json text: String) throws {
        let value: JSONValue
        do { value = try JSONParser.parse(text, maxDepth: 8) } catch { throw ComplianceError("proof: not the JSON of a proof (\(error))") }
        func string(_ v: JSONValue?, _ name: String) throws -> String {
            guard let s = v?.stringValue else { throw ComplianceError("proof: \(name) is missing") }
            return s
        }
        func integer(_ v: JSONValue?, _ name: String) throws -> Int64 {
            guard case let .number(text)? = v, let n = Int64(text) else { throw ComplianceError("proof: \(name) is missing") }
            return n
        }
        func hex(_ v: JSONValue?, _ name: String) throws -> [UInt8] {
            guard let bytes = Hex.decode(try string(v, name)) else { throw ComplianceError("proof: \(name) is not hexadecimal") }
            return bytes
        }
        func point(_ v: JSONValue?, _ name: String) throws -> LogPoint {
            let parts = try string(v, name).split(separator: "/")
            guard parts.count == 2, let t = UInt64(parts[0]), let p = Int64(parts[1]) else { throw ComplianceError("proof: \(name) is not a log point") }
            return LogPoint(transactionId: t, position: p)
        }
        guard value["format"]?.stringValue == "permaudit.inclusion-proof" else { throw ComplianceError("not a permaudit inclusion proof") }
        guard value["version"] == .number("1") else { throw ComplianceError("proof: version must be 1 (the only one this tool reads)") }
        let event = value["event"], s = value["seal"]
        guard let id = UUID(uuidString: try string(event?["eventId"], "event.eventId")) else { throw ComplianceError("proof: event.eventId is not a UUID") }
        guard case let .array(pathItems)? = value["path"] else { throw ComplianceError("proof: path is missing") }
        self.init(eventId: id, position: try integer(event?["position"], "event.position"),
                  canonical: try string(event?["canonical"], "event.canonical"), leafIndex: Int(try integer(value["leafIndex"], "leafIndex")),
                  path: try pathItems.map { try hex($0, "path") },
                  seal: Seal(id: try integer(s?["sealId"], "seal.sealId"), after: try point(s?["after"], "seal.after"),
                             through: try point(s?["through"], "seal.through"), eventCount: try integer(s?["eventCount"], "seal.eventCount"),
                             merkleRoot: try hex(s?["merkleRoot"], "seal.merkleRoot"), previousHash: try hex(s?["previousHash"], "seal.previousHash"),
                             sealedAt: try integer(s?["sealedAt"], "seal.sealedAt"), keyFingerprint: try string(s?["keyFingerprint"], "seal.keyFingerprint"),
                             sealHash: try hex(s?["sealHash"], "seal.sealHash"), signature: try hex(s?["signature"], "seal.signature")))
    }

    init(eventId: UUID, position: Int64, canonical: String, leafIndex: Int, path: [[UInt8]], seal: Seal) {
        self.eventId = eventId
        self.position = position
        self.canonical = canonical
        self.leafIndex = leafIndex
        self.path = path
        self.seal = seal
    }
}

public struct ComplianceError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
