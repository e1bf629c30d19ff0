import Foundation

/// Writes the wire-format events of one install's session.
struct EventBuilder {
    let install: Install
    let app: Model.App
    private(set) var events: [(json: String, at: Int64)] = []
    private var flow: String?
    private var attempt: String?
    /// The experiments object carried by the current attempt's events, if any.
    var experiment: String?
    var clock: TimestampFormatter

    init(install: Install, app: Model.App, clock: TimestampFormatter) {
        self.install = install
        self.app = app
        self.clock = clock
    }

    mutating func beginAttempt(flow: String, attempt: String) {
        self.flow = flow
        self.attempt = attempt
    }

    /// Adds an event; attempt events (all but status reads) carry the current attempt and flow.
    mutating func add(_ type: String, at: Int64, permission: String? = nil, attributes: String? = nil,
                      rng: inout SplitMix64) {
        let inAttempt = type != "permission.statusObserved"
        var json = "{\"eventId\":\"\(rng.uuid())\",\"type\":\"\(type)\",\"occurredAt\":\"\(clock.rfc3339(at))\""
        json += ",\"app\":\"\(app.id)\",\"subject\":\"\(install.subject)\",\"platform\":\"\(install.platform.rawValue)\""
        json += ",\"osVersion\":\"\(install.osVersion)\",\"appVersion\":\"\(app.versions[install.versionIndex])\""
        if inAttempt, let attempt { json += ",\"attempt\":\"\(attempt)\"" }
        if let permission { json += ",\"permission\":\"\(permission)\"" }
        if inAttempt, let flow { json += ",\"flow\":\"\(flow)\"" }
        if inAttempt, let experiment { json += ",\"experiments\":\(experiment)" }
        if let attributes { json += ",\"attributes\":\(attributes)" }
        events.append((json + "}", at))
    }

    /// A copy of `json` under a new event id, broken the way buggy clients break events:
    /// a misspelt permission, a time without offset, or a field the contract does not have.
    static func broken(_ json: String, kind: Int, eventId: String) -> String {
        var text = "{\"eventId\":\"\(eventId)\"" + json.drop { $0 != "," }
        switch kind {
        case 0:
            if let range = text.range(of: "\"permission\":\"") {
                text.insert(contentsOf: "x-", at: range.upperBound)
            } else {
                text.insert(contentsOf: "\"permission\":\"photos\",", at: text.index(after: text.startIndex))
            }
        case 1:
            if let z = text.range(of: "Z\"") { text.replaceSubrange(z, with: "\"") }
        default:
            text.insert(contentsOf: "\"userEmail\":\"redacted\",", at: text.index(after: text.startIndex))
        }
        return text
    }
}

/// RFC 3339 UTC timestamps with milliseconds, from milliseconds since 1970; remembers the date
/// text of each day it has seen.
public struct TimestampFormatter {
    private var days: [Int: String] = [:]
    private let formatter: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate]
        return formatter
    }()

    public init() {}

    public mutating func rfc3339(_ millis: Int64) -> String {
        let day = Int(millis >= 0 ? millis / 86_400_000 : (millis - 86_399_999) / 86_400_000)
        let ms = Int(millis - Int64(day) * 86_400_000)
        func pad(_ v: Int, _ width: Int) -> String {
            let text = String(v)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return date(day: day) + "T" + pad(ms / 3_600_000, 2) + ":" + pad(ms / 60_000 % 60, 2) + ":" + pad(ms / 1000 % 60, 2)
            + "." + pad(ms % 1000, 3) + "Z"
    }

    /// The date `yyyy-mm-dd` of a day number (days since 1970-01-01).
    public mutating func date(day: Int) -> String {
        if let text = days[day] { return text }
        let text = formatter.string(from: Date(timeIntervalSince1970: Double(day) * 86_400))
        days[day] = text
        return text
    }
}
