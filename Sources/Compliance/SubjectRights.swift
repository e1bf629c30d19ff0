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

    /// What an erasure did.
    public struct Erasure: Sendable, Equatable {
        /// The stream whose link to the install id was deleted.
        public var streamKey: Int64
        /// How many of the stream's events hold the install id in a field of their own (a flow,
        /// an experiment, an attribute: the contract does not forbid it), which the immutable
        /// log keeps. Letter case is ignored; ids shorter than 6 characters are not looked for,
        /// as for the erasure's reason (043).
        public var eventsHoldingTheId: Int
    }

    /// Deletes the link between the install id and its stream, in the caller's transaction;
    /// nil when the install is unknown (or erased already). The events stay in the log, unlinked.
    public static func erase(_ db: Connection, app: String, subject: String, reason: String) throws -> Erasure? {
        let erased: Int64? = try db.query("select audit.erase_subject($1, $2, $3)", [app, subject, reason]).scalar()
        guard let key = erased else { return nil }
        // The id as it appears inside the payload's JSON text: its JSON string without the quotes.
        let holding = try db.query("""
            select count(*)::int
              from (select to_jsonb($2::text)::text as quoted) id, audit.events e
             where e.stream_key = $1 and length($2::text) >= 6
               and strpos(lower(e.payload::text), lower(substr(id.quoted, 2, length(id.quoted) - 2))) > 0
            """, [key, subject]).scalar(Int.self)
        return Erasure(streamKey: key, eventsHoldingTheId: holding)
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
