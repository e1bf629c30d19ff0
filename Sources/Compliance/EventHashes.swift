import Crypto
import EventLog
import Foundation
import Postgres

/// One event as sealed: its position, id and leaf hash, in committed order.
public struct SealedLeaf: Equatable, Sendable {
    public var position: Int64
    public var eventId: UUID
    public var hash: [UInt8]

    /// The `leaves` column of audit.seals: per event 8 bytes of position (big-endian), the 16
    /// bytes of the event id and the 32-byte leaf hash.
    static let size = 56

    static func encode(_ leaves: [SealedLeaf]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(leaves.count * size)
        for leaf in leaves {
            withUnsafeBytes(of: leaf.position.bigEndian) { out.append(contentsOf: $0) }
            withUnsafeBytes(of: leaf.eventId.uuid) { out.append(contentsOf: $0) }
            out.append(contentsOf: leaf.hash)
        }
        return out
    }

    static func decode(_ bytes: [UInt8]) -> [SealedLeaf]? {
        guard bytes.count % size == 0 else { return nil }
        return stride(from: 0, to: bytes.count, by: size).map { offset in
            let position = bytes[offset..<(offset + 8)].reduce(Int64(0)) { $0 << 8 | Int64($1) }
            let id = Array(bytes[(offset + 8)..<(offset + 24)])
            let uuid = UUID(uuid: (id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14], id[15]))
            return SealedLeaf(position: position, eventId: uuid, hash: Array(bytes[(offset + 24)..<(offset + 56)]))
        }
    }
}

/// A point in committed order: (transaction id, position), the log reader's checkpoint.
public typealias LogPoint = EventLog.Checkpoint

extension EventLog.Checkpoint {
    /// How seals and proofs write a point: "transactionId/position" (part of the signed seal
    /// message, see docs/compliance.md).
    public var sealNotation: String { "\(transactionId)/\(position)" }
}

/// The canonical form of an event, and reading the log's events with their leaf hashes.
///
/// The canonical text is PostgreSQL's rendering of a JSON array of every column of the row
/// (times as integer microseconds, so that no time zone setting changes it); the leaf hash is
/// SHA-256(0x00 || its UTF-8 bytes). docs/compliance.md shows the same expression for psql.
public enum EventHashes {
    public static let canonicalSQL = """
        jsonb_build_array(e.position, e.transaction_id::text, e.event_id::text, e.stream_key, e.stream_version, e.type,
                          (extract(epoch from e.occurred_at) * 1000000)::bigint, (extract(epoch from e.recorded_at) * 1000000)::bigint,
                          e.app, e.platform, e.os_major, e.app_version, e.attempt::text, e.permission, e.flow, e.payload)::text
        """

    /// Calls `body` with each event after `after` up to `through` (inclusive) in committed order:
    /// its point, id and canonical text, reading in bounded batches (a cursor). Runs in the
    /// caller's transaction.
    public static func forEachEvent(_ db: Connection, after: LogPoint, through: LogPoint,
                                    _ body: (LogPoint, UUID, String) throws -> Void) throws {
        try forEachRow(db, column: canonicalSQL, after: after, through: through, body)
    }

    public static func leafHash(canonical: String) -> [UInt8] { Merkle.leafHash(Array(canonical.utf8)) }

    /// Like `forEachEvent`, with the leaf hash computed by the server (pg_catalog.sha256 over the
    /// same canonical text): what `verify` reads, a 32-byte hash per event instead of the row.
    /// The sealer hashes in Swift, so every verification also checks the two implementations
    /// against each other.
    public static func forEachLeaf(_ db: Connection, after: LogPoint, through: LogPoint,
                                   _ body: (LogPoint, UUID, [UInt8]) throws -> Void) throws {
        let hash = "encode(pg_catalog.sha256('\\x00'::bytea || pg_catalog.convert_to(\(canonicalSQL), 'UTF8')), 'hex')"
        try forEachRow(db, column: hash, after: after, through: through) { try body($0, $1, Hex.decode($2) ?? []) }
    }

    /// The events of a range in committed order with one computed text column, through a cursor.
    private static func forEachRow(_ db: Connection, column: String, after: LogPoint, through: LogPoint,
                                   _ body: (LogPoint, UUID, String) throws -> Void) throws {
        try db.query("""
            declare permaudit_events no scroll cursor for
            select e.transaction_id::text, e.position, e.event_id, \(column)
              from audit.events e
             where (e.transaction_id, e.position) > ($1::xid8, $2::bigint)
               and (e.transaction_id, e.position) <= ($3::xid8, $4::bigint)
             order by e.transaction_id, e.position
            """, [String(after.transactionId), after.position, String(through.transactionId), through.position])
        defer { _ = try? db.query("close permaudit_events") }
        while true {
            let rows = try db.query("fetch 10000 from permaudit_events").decode((UInt64, Int64, UUID, String).self)
            if rows.isEmpty { break }
            for (transactionId, position, id, text) in rows {
                try body(LogPoint(transactionId: transactionId, position: position), id, text)
            }
        }
    }
}
