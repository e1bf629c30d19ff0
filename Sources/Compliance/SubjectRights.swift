import Foundation
import PermissionEvents
import Postgres

/// Access requests and erasure for one install (app, subject), and the access record.
public enum SubjectRights {
    public struct Event: Sendable {
        public var position: Int64
        public var transactionId: UInt64
        public var recordedAt: String
        public var sealId: Int64?
        /// The event as sent (the stored payload with the subject put back).
        public var json: String
    }

    /// Every event of the install, in stream order. The database records the request in
    /// audit.access_log (`audit.subject_events`, migration 024).
    public static func export(_ db: Connection, app: String, subject: String) throws -> [Event] {
        try db.query("""
            select position, transaction_id::text, to_char(recorded_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                   seal_id, (payload || jsonb_build_object('subject', $2::text))::text
              from audit.subject_events($1, $2)
            """, [app, subject]).decode((Int64, UInt64, String, Int64?, String).self).map {
            Event(position: $0.0, transactionId: $0.1, recordedAt: $0.2, sealId: $0.3, json: $0.4)
        }
    }

    /// One NDJSON line per event: {"position", "transactionId", "recordedAt", "sealId", "event"}.
    public static func ndjson(_ events: [Event]) -> String {
        events.map { event in
            var line = "{\"position\":\(event.position),\"transactionId\":\"\(event.transactionId)\",\"recordedAt\":"
            JSONValue.writeQuoted(event.recordedAt, to: &line)
            line += ",\"sealId\":\(event.sealId.map(String.init) ?? "null"),\"event\":\(event.json)}\n"
            return line
        }.joined()
    }

    /// Deletes the link between the install id and its stream; returns the stream key, or nil
    /// when the install is unknown. The events stay in the log, unlinked.
    public static func erase(_ db: Connection, app: String, subject: String, reason: String) throws -> Int64? {
        try db.query("select audit.erase_subject($1, $2, $3)", [app, subject, reason]).decode((Int64?).self)[0]
    }

    /// Records an audit command (never an install id) in audit.access_log.
    public static func recordAccess(_ db: Connection, command: String, details: [String: String]) throws {
        var json = "{"
        json += details.sorted { $0.key < $1.key }.map { key, value in
            var item = ""
            JSONValue.writeQuoted(key, to: &item)
            item += ":"
            JSONValue.writeQuoted(value, to: &item)
            return item
        }.joined(separator: ",")
        json += "}"
        try db.query("select audit.record_access($1, $2::jsonb)", [command, json])
    }
}
