import Foundation

/// Why an event breaks the contract: the field (a JSON path such as `attributes.selectedCount`)
/// and the rule. Never contains the offending value.
public struct EventProblem: Error, Equatable, Sendable, CustomStringConvertible {
    public var field: String
    public var rule: String
    public init(field: String, rule: String) {
        self.field = field
        self.rule = rule
    }
    public var description: String { "\(field): \(rule)" }
}

/// An event that passed validation.
public struct ValidatedEvent: Sendable {
    public var eventId: UUID
    public var type: EventType
    public var occurredAt: Date
    public var app: String
    public var subject: String
    public var platform: Platform
    public var osVersion: String
    public var osMajor: Int
    public var appVersion: String
    public var attempt: UUID?
    public var permission: Permission?
    public var flow: String?
    /// The experiment assignments, in the order `jsonb` keeps the keys (shorter first, then byte
    /// order). A list, not a dictionary: keys that differ in bytes but are canonically equivalent
    /// ("\u{E9}" and "e\u{301}") are two experiments to the database, one key to a Swift `String`.
    public var experiments: [ExperimentAssignment]
    /// The whole event as parsed.
    public var json: JSONValue
}

/// One member of an event's `experiments`: the experiment key and the variant shown.
public struct ExperimentAssignment: Hashable, Sendable {
    public var experiment: String
    public var variant: String

    public init(experiment: String, variant: String) {
        self.experiment = experiment
        self.variant = variant
    }
}

/// The wire-format v1 rules (domain contract sections 2-3) in code. The database's
/// `audit.event_problem(jsonb)` enforces the same rules in the same order.
public struct EventValidator: Sendable {
    public static let maxEventBytes = 16 * 1024
    /// Longer lines are not read whole (they are over the size limit in any case): the tools'
    /// memory stays bounded.
    public static let maxLineBytes = 16 * maxEventBytes
    /// The rule reported for such a line.
    public static let longLineRule = "line longer than 256 KiB, not read (an event is at most 16 KiB of JSON)"
    public static let maxFutureSkew: TimeInterval = 24 * 3600
    public static let topLevelFields: Set<String> = [
        "eventId", "type", "occurredAt", "app", "subject", "platform", "osVersion", "appVersion",
        "attempt", "permission", "flow", "experiments", "attributes",
    ]

    /// Server time against which `occurredAt` is checked.
    public var now: Date

    public init(now: Date = Date()) { self.now = now }

    /// Parses and validates one line of NDJSON.
    public func validate(line: String) -> Result<ValidatedEvent, EventProblem> {
        validate(bytes: Array(line.utf8))
    }

    /// Parses and validates one line of NDJSON as the client sent it: bytes that are not valid
    /// UTF-8 are malformed JSON (a `String` would already have replaced them with U+FFFD).
    public func validate(bytes: [UInt8]) -> Result<ValidatedEvent, EventProblem> {
        // A line far over the size limit is refused before parsing.
        if bytes.count > Self.maxLineBytes {
            return .failure(EventProblem(field: "event", rule: Self.longLineRule))
        }
        // Parsed with room to spare: the nesting limit applies to the value once a repeated key's
        // earlier values are dropped (as the database sees it), which `validate(_:)` checks.
        let parsed: Result<JSONParser.Sized, EventProblem> = bytes.withUnsafeBufferPointer { buffer in
            do { return .success(try JSONParser.parseSized(bytes: buffer, maxDepth: Self.parseDepth)) } catch let error as JSONSyntaxError where error.isTooDeep {
                return .failure(EventProblem(field: "event", rule: JSONSyntaxError.tooDeep(JSONParser.defaultMaxDepth)))
            } catch {
                return .failure(EventProblem(field: "event", rule: "malformed JSON: \(error)"))
            }
        }
        return parsed.flatMap { validate($0.value, sentLength: $0.sentLength) }
    }

    /// How deep the parser of a line goes before it gives up (a bound on its recursion).
    static let parseDepth = 512

    /// Validates an event parsed elsewhere (e.g. one of a batch): the nesting limit first.
    /// `sentLength`: the bytes the event spanned as the client sent it (`JSONParser.Sized`), 0
    /// where not known. The size limit holds for the event as sent and for its compact form alike: the
    /// database, which receives `jsonb`, can measure only the compact form.
    public func validate(_ value: JSONValue, sentLength: Int = 0) -> Result<ValidatedEvent, EventProblem> {
        guard value.depth <= JSONParser.defaultMaxDepth else {
            return .failure(EventProblem(field: "event", rule: JSONSyntaxError.tooDeep(JSONParser.defaultMaxDepth)))
        }
        do {
            return .success(try check(value, sentLength: sentLength))
        } catch {
            return .failure(error)
        }
    }

    private func check(_ value: JSONValue, sentLength: Int) throws(EventProblem) -> ValidatedEvent {
        guard case let .object(members) = value else { throw EventProblem(field: "event", rule: "must be a JSON object") }
        if sentLength > Self.maxEventBytes || value.compactTextLength > Self.maxEventBytes {
            throw EventProblem(field: "event", rule: "must be at most 16 KiB of JSON")
        }
        // Unknown fields, reported in jsonb key order (shorter keys first) like the database does.
        let unknown = members.map(\.key).filter { !Self.topLevelFields.contains($0) }
        if let first = unknown.min(by: Self.jsonbKeyOrder) {
            throw EventProblem(field: Self.keyInMessage(first), rule: "unknown field")
        }
        try noNulCharacters(value, path: "")

        let eventId = try uuid(value, "eventId", required: true)!
        guard let type = EventType(rawValue: try string(value, "type")) else {
            throw EventProblem(field: "type", rule: "must be one of the event catalogue types")
        }
        let occurredAt = try timestamp(value)
        let app = try string(value, "app", length: 1...255, pattern: Self.isIdentifier, patternRule: "[A-Za-z0-9._-]")
        let subject = try string(value, "subject", length: 1...128)
        if Self.looksLikeEmail(subject) {
            throw EventProblem(field: "subject", rule: "must be a pseudonymous install id, not an e-mail address")
        }
        guard let platform = Platform(rawValue: try string(value, "platform")) else {
            throw EventProblem(field: "platform", rule: "must be \"ios\" or \"android\"")
        }
        let osVersion = try string(value, "osVersion", length: 1...64, pattern: { Self.majorVersion($0) != nil },
                                   patternRule: "a major version of 1-9 digits, then a dot or the end, e.g. 17.4.1 or 14")
        let osMajor = Self.majorVersion(osVersion)!
        let appVersion = try string(value, "appVersion", length: 1...64)

        let attempt = try uuid(value, "attempt", presence: type.attempt, type: type)
        let permission = try permissionField(value, type: type, platform: platform)
        var flow: String?
        if value["flow"] != nil {
            flow = try string(value, "flow", length: 1...64, pattern: Self.isIdentifier, patternRule: "[A-Za-z0-9._-]")
        }
        let experiments = try experimentsField(value)
        try attributesField(value, type: type)

        return ValidatedEvent(
            eventId: eventId, type: type, occurredAt: occurredAt, app: app, subject: subject,
            platform: platform, osVersion: osVersion, osMajor: osMajor, appVersion: appVersion,
            attempt: attempt, permission: permission, flow: flow, experiments: experiments, json: value
        )
    }

    // MARK: Fields

    private func string(
        _ object: JSONValue, _ field: String, path: String? = nil, length: ClosedRange<Int>? = nil,
        pattern: ((String) -> Bool)? = nil, patternRule: String = ""
    ) throws(EventProblem) -> String {
        let name = path ?? field
        guard let raw = object[field] else { throw EventProblem(field: name, rule: "is required") }
        guard case let .string(text) = raw else { throw EventProblem(field: name, rule: "must be a string") }
        if let length {
            let count = text.unicodeScalars.count
            if count < length.lowerBound || count > length.upperBound {
                throw EventProblem(field: name, rule: "must be \(length.lowerBound)-\(length.upperBound) characters")
            }
        }
        if let pattern, !pattern(text) {
            throw EventProblem(field: name, rule: "must match \(patternRule)")
        }
        return text
    }

    private func uuid(_ object: JSONValue, _ field: String, required: Bool) throws(EventProblem) -> UUID? {
        guard let raw = object[field] else {
            if required { throw EventProblem(field: field, rule: "is required") }
            return nil
        }
        guard case let .string(text) = raw else { throw EventProblem(field: field, rule: "must be a string") }
        guard Self.isUUID(text), let id = UUID(uuidString: text) else {
            throw EventProblem(field: field, rule: "must be a UUID (8-4-4-4-12 hexadecimal digits)")
        }
        return id
    }

    private func uuid(_ object: JSONValue, _ field: String, presence: EventType.Presence, type: EventType) throws(EventProblem) -> UUID? {
        switch presence {
        case .required:
            if object[field] == nil { throw EventProblem(field: field, rule: "is required for \(type.rawValue)") }
            return try uuid(object, field, required: true)
        case .optional:
            return try uuid(object, field, required: false)
        case .absent:
            if object[field] != nil { throw EventProblem(field: field, rule: "must be absent for \(type.rawValue)") }
            return nil
        }
    }

    private func timestamp(_ object: JSONValue) throws(EventProblem) -> Date {
        let text = try string(object, "occurredAt")
        guard let date = RFC3339.parse(text) else {
            throw EventProblem(field: "occurredAt", rule: "must be an RFC 3339 timestamp with an offset, e.g. 2026-10-03T09:15:27.120Z")
        }
        if date.timeIntervalSince(now) > Self.maxFutureSkew {
            throw EventProblem(field: "occurredAt", rule: "must not be more than 24 h after server time")
        }
        return date
    }

    private func permissionField(_ object: JSONValue, type: EventType, platform: Platform) throws(EventProblem) -> Permission? {
        switch type.permission {
        case .absent:
            if object["permission"] != nil {
                throw EventProblem(field: "permission", rule: "must be absent for \(type.rawValue)")
            }
            return nil
        case .required, .optional:
            guard object["permission"] != nil else {
                throw EventProblem(field: "permission", rule: "is required for \(type.rawValue)")
            }
            guard let permission = Permission(rawValue: try string(object, "permission")) else {
                throw EventProblem(field: "permission", rule: "must be one of the permissions of the wire format")
            }
            guard permission.platform == platform else {
                throw EventProblem(field: "permission", rule: "must be a \(platform.rawValue).* permission on platform \(platform.rawValue)")
            }
            return permission
        }
    }

    private func experimentsField(_ object: JSONValue) throws(EventProblem) -> [ExperimentAssignment] {
        guard let raw = object["experiments"] else { return [] }
        guard case let .object(members) = raw else { throw EventProblem(field: "experiments", rule: "must be an object") }
        var result: [ExperimentAssignment] = []
        for member in members.sorted(by: { Self.jsonbKeyOrder($0.key, $1.key) }) {
            let count = member.key.unicodeScalars.count
            guard (1...64).contains(count) else {
                throw EventProblem(field: "experiments", rule: "keys must be 1-64 characters")
            }
            guard case let .string(variant) = member.value else {
                throw EventProblem(field: "experiments.\(Self.keyInMessage(member.key))", rule: "must be a string")
            }
            guard (1...64).contains(variant.unicodeScalars.count) else {
                throw EventProblem(field: "experiments.\(Self.keyInMessage(member.key))", rule: "must be 1-64 characters")
            }
            result.append(ExperimentAssignment(experiment: member.key, variant: variant))
        }
        return result
    }

    private func attributesField(_ object: JSONValue, type: EventType) throws(EventProblem) {
        let rules = type.attributes
        guard let raw = object["attributes"] else {
            if let first = rules.first(where: \.required) {
                throw EventProblem(field: "attributes.\(first.name)", rule: "is required for \(type.rawValue)")
            }
            return
        }
        guard case .object = raw else { throw EventProblem(field: "attributes", rule: "must be an object") }
        for rule in rules {
            let path = "attributes.\(rule.name)"
            guard let value = raw[rule.name] else {
                if rule.required { throw EventProblem(field: path, rule: "is required for \(type.rawValue)") }
                continue
            }
            switch rule.kind {
            case .string:
                guard case .string = value else { throw EventProblem(field: path, rule: "must be a string") }
            case .boolean:
                guard case .bool = value else { throw EventProblem(field: path, rule: "must be a boolean") }
            case let .integer(minimum):
                guard case let .number(text) = value, let number = Self.exactInteger(text),
                      number >= minimum, number <= 2_147_483_647 else {
                    throw EventProblem(field: path, rule: "must be an integer from \(minimum) to 2147483647")
                }
            case let .oneOf(choices):
                guard case let .string(text) = value, choices.contains(text) else {
                    throw EventProblem(field: path, rule: "must be one of \(choices.joined(separator: ", "))")
                }
            }
        }
    }

    private func noNulCharacters(_ value: JSONValue, path: String) throws(EventProblem) {
        switch value {
        case let .string(text):
            if text.utf8.contains(0) { throw EventProblem(field: path.isEmpty ? "event" : path, rule: "must not contain a NUL character") }
        case let .array(elements):
            for element in elements { try noNulCharacters(element, path: path) }
        case let .object(members):
            for member in members {
                let key = Self.keyInMessage(member.key)
                let child = path.isEmpty ? key : "\(path).\(key)"
                if member.key.utf8.contains(0) { throw EventProblem(field: path.isEmpty ? "event" : path, rule: "must not contain a NUL character") }
                try noNulCharacters(member.value, path: child)
            }
        default:
            break
        }
    }

    // MARK: Lexical rules

    /// How an error names a key the client chose: as written when it is 1-64 printable ASCII
    /// characters, else by its length only, so that an error line never carries a line break, an
    /// escape sequence or a long copy of the payload (as `audit.key_in_message`, migration 018).
    public static func keyInMessage(_ key: String) -> String {
        let scalars = key.unicodeScalars
        if (1...64).contains(scalars.count), scalars.allSatisfy({ (0x20...0x7E).contains($0.value) }) { return key }
        return "<\(scalars.count)-character key>"
    }

    /// PostgreSQL's jsonb key order: shorter keys first, then bytewise.
    public static func jsonbKeyOrder(_ a: String, _ b: String) -> Bool {
        let (la, lb) = (a.utf8.count, b.utf8.count)
        return la != lb ? la < lb : a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    /// Whether `text` is a well-formed `app`: 1-255 characters `[A-Za-z0-9._-]`.
    public static func isApp(_ text: String) -> Bool {
        (1...255).contains(text.utf8.count) && isIdentifier(text)
    }

    static func isIdentifier(_ text: String) -> Bool {
        text.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2E || b == 0x5F || b == 0x2D
        }
    }

    /// The integer a JSON number literal denotes exactly (`3`, `3.0`, `1e2`, `-0`), nil when it has a
    /// fraction (`0.99999999999999999999`, which a `Double` would round to 1) or more than 12
    /// digits: decided on the decimal digits, as PostgreSQL's `numeric` does.
    static func exactInteger(_ literal: String) -> Int? {
        var text = Substring(literal)
        let negative = text.first == "-"
        if negative { text = text.dropFirst() }
        var exponent = 0
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            guard let value = Int(text[text.index(after: e)...].drop(while: { $0 == "+" })) else { return nil }
            exponent = value
            text = text[..<e]
        }
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        let digits = Array(parts[0] + (parts.count > 1 ? parts[1] : ""))
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber) else { return nil }
        // Where the decimal point falls among the digits once the exponent is applied (an exponent
        // beyond the digits' count either way decides the same as one just beyond it).
        let point = parts[0].count + max(min(exponent, digits.count + 13), -(digits.count + 1))
        guard digits.dropFirst(max(point, 0)).allSatisfy({ $0 == "0" }) else { return nil }
        let whole = digits.prefix(max(point, 0)).drop(while: { $0 == "0" })
        let padding = max(point - digits.count, 0)
        guard whole.count + (whole.isEmpty ? 0 : padding) <= 12 else { return nil }
        let magnitude = Int(String(whole) + String(repeating: "0", count: whole.isEmpty ? 0 : padding)) ?? 0
        return negative ? -magnitude : magnitude
    }

    /// osMajor: the integer before the first '.' (1-9 digits, then '.' or the end), read from the
    /// bytes; nil when the text does not start that way.
    static func majorVersion(_ text: String) -> Int? {
        let major = text.utf8.prefix { $0 != UInt8(ascii: ".") }
        guard (1...9).contains(major.count), major.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return major.reduce(0) { $0 * 10 + Int($1 - 0x30) }
    }

    static func isUUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (i, b) in bytes.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard b == 0x2D else { return false }
            } else {
                guard (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66) else { return false }
            }
        }
        return true
    }

    /// `local@domain.tld` as the database's `^[^@]+@[^@.]+(\.[^@.]+)+$`: over Unicode scalars, so
    /// that a combining mark after the `@` or a dot does not hide it (as a `Character` would).
    static func looksLikeEmail(_ text: String) -> Bool {
        let parts = text.unicodeScalars.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty else { return false }
        let domain = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        return domain.count >= 2 && domain.allSatisfy { !$0.isEmpty }
    }
}

/// RFC 3339 `date-time` with a required offset (`Z` or `±hh:mm`, at most ±15:59 as PostgreSQL
/// stores), years 0001-9999, a fraction of any length.
public enum RFC3339 {
    public static func parse(_ text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count >= 20 else { return nil }
        func digits(_ from: Int, _ count: Int) -> Int? {
            guard from + count <= b.count else { return nil }
            var value = 0
            for i in from..<(from + count) {
                guard b[i] >= 0x30 && b[i] <= 0x39 else { return nil }
                value = value * 10 + Int(b[i] - 0x30)
            }
            return value
        }
        guard let year = digits(0, 4), b[4] == 0x2D, let month = digits(5, 2), b[7] == 0x2D, let day = digits(8, 2),
              b[10] == 0x54 || b[10] == 0x74,
              let hour = digits(11, 2), b[13] == 0x3A, let minute = digits(14, 2), b[16] == 0x3A, let second = digits(17, 2)
        else { return nil }
        var index = 19
        var fraction = 0.0
        if index < b.count, b[index] == 0x2E {
            index += 1
            var scale = 0.1
            let start = index
            while index < b.count, b[index] >= 0x30 && b[index] <= 0x39 {
                fraction += Double(b[index] - 0x30) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }  // RFC 3339: one digit or more, no upper bound
        }
        guard index < b.count else { return nil }
        var offset = 0
        switch b[index] {
        case 0x5A, 0x7A:
            index += 1
        case 0x2B, 0x2D:
            guard let oh = digits(index + 1, 2), index + 3 < b.count, b[index + 3] == 0x3A, let om = digits(index + 4, 2),
                  oh <= 15, om <= 59 else { return nil }  // PostgreSQL's limit; real offsets are within ±14:00
            offset = (oh * 3600 + om * 60) * (b[index] == 0x2D ? -1 : 1)
            index += 6
        default:
            return nil
        }
        guard index == b.count, year >= 1, (1...12).contains(month), day >= 1, day <= daysIn(month, year),
              hour <= 23, minute <= 59, second <= 59 else { return nil }
        let days = daysFromCivil(year, month, day)
        return Date(timeIntervalSince1970: Double(days) * 86_400 + Double(hour * 3600 + minute * 60 + second - offset) + fraction)
    }

    static func daysIn(_ month: Int, _ year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    static func daysFromCivil(_ year: Int, _ month: Int, _ day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        return era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
    }
}
