import Foundation
import Postgres
import Simulation

/// Valid wire-format events of every type, fast and deterministic, for benchmarks: a spread of
/// apps, installs, platforms and flows, grouped into attempts of a few events each.
public struct SyntheticEvents {
    public var subjects: Int
    private var generator: SplitMix64
    private var attemptEventsLeft = 0
    private var attempt = ""
    private var subject = 0
    private var platformIsIOS = true
    private var sequence: UInt64 = 0
    private let start = Date(timeIntervalSince1970: 1_790_000_000)

    public init(seed: UInt64, subjects: Int = 50_000) {
        self.subjects = subjects
        generator = SplitMix64(seed: seed)
    }

    static let apps = ["com.example.snap", "com.example.chat", "org.example.backup", "com.example.editor"]
    /// Each install belongs to one app.
    static func app(of subject: Int) -> String { apps[subject % apps.count] }
    static let flows = ["avatar", "chatAttachment", "backup", "gallery", "editorSave"]
    static let iosTypes = ["prePermission.shown", "prePermission.accepted", "permission.prompted", "permission.granted",
                           "permission.limited", "permission.denied", "picker.opened", "picker.completed"]
    static let androidTypes = ["permission.prompted", "permission.granted", "permission.denied", "permission.limited",
                               "picker.opened", "picker.cancelled", "settings.opened", "permission.statusObserved"]

    /// A fresh random UUID text from the generator.
    mutating func uuid() -> String { generator.uuid() }

    /// The next event as one JSON line (no newline), and its fields for a raw-COPY reference.
    public mutating func next() -> Event {
        if attemptEventsLeft == 0 {
            attemptEventsLeft = 1 + Int(generator.next() % 4)
            attempt = uuid()
            subject = Int(generator.next() % UInt64(subjects))
            platformIsIOS = generator.next() % 2 == 0
        }
        attemptEventsLeft -= 1
        sequence += 1
        let app = Self.app(of: subject)
        let types = platformIsIOS ? Self.iosTypes : Self.androidTypes
        let type = types[Int(generator.next() % UInt64(types.count))]
        let occurred = start.addingTimeInterval(Double(sequence) * 2.5)
        let occurredAt = PostgresTimestamp.format(occurred)
        let osVersion = platformIsIOS ? "\(15 + subject % 4).\(subject % 7)" : "\(11 + subject % 5)"
        let appVersion = "5.\(subject % 6).0"
        let flow = Self.flows[subject % Self.flows.count]
        let permission: String? = type.hasPrefix("picker.") ? nil : (platformIsIOS ? "ios.photos.readWrite" : "android.READ_MEDIA_IMAGES")
        var attributes = ""
        switch type {
        case "picker.opened": attributes = platformIsIOS ? "{\"picker\":\"phpicker\",\"selectionLimit\":1}" : "{\"picker\":\"androidPhotoPicker\",\"selectionLimit\":1}"
        case "picker.completed": attributes = "{\"selectedCount\":1}"
        case "permission.denied": attributes = "{\"permanent\":false}"
        case "permission.prompted": attributes = "{\"dialogShown\":true}"
        case "permission.statusObserved": attributes = "{\"status\":\"granted\"}"
        default: break
        }
        let eventId = uuid()
        var json = "{\"eventId\":\"\(eventId)\",\"type\":\"\(type)\",\"occurredAt\":\"\(occurredAt)\",\"app\":\"\(app)\",\"subject\":\"inst-\(subject)\",\"platform\":\"\(platformIsIOS ? "ios" : "android")\",\"osVersion\":\"\(osVersion)\",\"appVersion\":\"\(appVersion)\",\"attempt\":\"\(attempt)\""
        if let permission { json += ",\"permission\":\"\(permission)\"" }
        json += ",\"flow\":\"\(flow)\",\"experiments\":{\"priming-2026\":\"\(subject % 2 == 0 ? "control" : "treatment")\"}"
        if !attributes.isEmpty { json += ",\"attributes\":\(attributes)" }
        json += "}"
        return Event(json: json, eventId: eventId, type: type, occurredAt: occurredAt, app: app, subject: subject,
                     platform: platformIsIOS ? "ios" : "android", osMajor: Int(osVersion.prefix { $0 != "." })!,
                     appVersion: appVersion, attempt: attempt, permission: permission, flow: flow)
    }

    public struct Event: Sendable {
        public var json: String
        /// The event as the log stores it: without `subject`.
        public var payload: String { json.replacingOccurrences(of: "\"subject\":\"inst-\(subject)\",", with: "") }
        /// One row for `COPY audit.events (event_id, stream_key, stream_version, type, occurred_at, app,
        /// platform, os_major, app_version, attempt, permission, flow, payload)`.
        /// With `recordedAt`, a last column for `recorded_at`.
        public func copyRow(version: Int, recordedAt: String? = nil) -> String {
            "\(eventId)\t\(subject)\t\(version)\t\(type)\t\(occurredAt)\t\(app)\t\(platform)\t\(osMajor)\t\(appVersion)\t\(attempt)\t\(permission ?? "\\N")\t\(flow)\t\(payload.replacingOccurrences(of: "\\", with: "\\\\"))"
                + (recordedAt.map { "\t" + $0 } ?? "") + "\n"
        }
        public var eventId: String
        public var type: String
        public var occurredAt: String
        public var app: String
        public var subject: Int
        public var platform: String
        public var osMajor: Int
        public var appVersion: String
        public var attempt: String
        public var permission: String?
        public var flow: String
    }
}

extension SyntheticEvents {
    /// Loads `count` events straight into `audit.events` by COPY (not through the write path,
    /// whose speed `bench ingest` measures), one install per 20 events (at least 1000), after
    /// linking each install the generator can draw in `audit.subject_streams` as the write path
    /// does (its subject, `inst-<n>`, under stream key n: a link must come before its stream's
    /// events, 035), then VACUUM ANALYZE. By default `recorded_at` is the loading transaction's time; with
    /// `recordedAsOccurred` each event is recorded at its `occurredAt`, like a log filled live.
    public static func copy(_ count: Int, into db: Connection, seed: UInt64, recordedAsOccurred: Bool = false) throws {
        var generator = SyntheticEvents(seed: seed, subjects: max(1000, count / 20))
        let installs = Array(0..<generator.subjects)
        try db.query("""
            insert into audit.subject_streams (stream_key, app, subject) overriding system value
            select k, a, 'inst-' || k from unnest($1::bigint[], $2::text[]) as i(k, a)
            """, [installs, installs.map(Self.app(of:))])
        try db.execute("select setval(pg_get_serial_sequence('audit.subject_streams', 'stream_key'), max(stream_key)) from audit.subject_streams")
        var versions: [Int: Int] = [:]
        let columns = "event_id, stream_key, stream_version, type, occurred_at, app, platform, os_major, app_version, attempt, permission, flow, payload"
            + (recordedAsOccurred ? ", recorded_at" : "")
        try db.copyIn("copy audit.events (\(columns)) from stdin") { writer in
            for _ in 0..<count {
                let event = generator.next()
                let version = versions[event.subject, default: 0]
                versions[event.subject] = version + 1
                try writer.write(event.copyRow(version: version, recordedAt: recordedAsOccurred ? event.occurredAt : nil))
            }
        }
        try db.execute("vacuum analyze audit.events, audit.subject_streams")
    }
}
