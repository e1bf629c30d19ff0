import Foundation

/// A value that can be sent as a query parameter (text format).
public protocol PostgresEncodable: Sendable {
    /// The value in PostgreSQL's text input format.
    var postgresText: String { get }
    /// `postgresText`, or an error for a value that has no text PostgreSQL would read as that
    /// value (a `Date` out of range); what a query sends. The default is `postgresText`.
    func checkedPostgresText() throws -> String
}

extension PostgresEncodable {
    public func checkedPostgresText() throws -> String { postgresText }
}

/// A value that can be read from a result column (text format).
public protocol PostgresDecodable {
    init?(postgresText: String)
    /// The value SQL NULL decodes to; nil (the default) when the type has none.
    static var postgresNull: Self? { get }
}

extension PostgresDecodable {
    public static var postgresNull: Self? { nil }
}

/// An array in PostgreSQL's array input format (`{"a","b"}`): each element quoted, with `\` before
/// `"` and `\`, so that commas, braces, spaces and quotes stay inside their element. Cast the
/// parameter in the SQL (`$1::text[]`, `$1::bigint[]`).
extension Array: PostgresEncodable where Element: PostgresEncodable {
    public var postgresText: String { Self.literal(map(\.postgresText)) }
    public func checkedPostgresText() throws -> String { Self.literal(try map { try $0.checkedPostgresText() }) }

    private static func literal(_ elements: [String]) -> String {
        "{" + elements.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            .joined(separator: ",") + "}"
    }
}

extension String: PostgresEncodable, PostgresDecodable {
    public var postgresText: String { self }
    public init?(postgresText: String) { self = postgresText }
}

extension Int: PostgresEncodable, PostgresDecodable {
    public var postgresText: String { String(self) }
    public init?(postgresText: String) { self.init(postgresText) }
}

extension Int64: PostgresEncodable, PostgresDecodable {
    public var postgresText: String { String(self) }
    public init?(postgresText: String) { self.init(postgresText) }
}

extension UInt64: PostgresEncodable, PostgresDecodable {
    public var postgresText: String { String(self) }
    public init?(postgresText: String) { self.init(postgresText) }
}

extension Double: PostgresEncodable, PostgresDecodable {
    public var postgresText: String {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return String(self)
    }
    public init?(postgresText: String) {
        switch postgresText {
        case "NaN": self = .nan
        case "Infinity": self = .infinity
        case "-Infinity": self = -.infinity
        default: self.init(postgresText)
        }
    }
}

extension Bool: PostgresEncodable, PostgresDecodable {
    public var postgresText: String { self ? "t" : "f" }
    public init?(postgresText: String) {
        switch postgresText {
        case "t", "true": self = true
        case "f", "false": self = false
        default: return nil
        }
    }
}

extension UUID: PostgresEncodable, PostgresDecodable {
    public var postgresText: String { uuidString.lowercased() }
    public init?(postgresText: String) { self.init(uuidString: postgresText) }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static var postgresNull: Self? { .some(.none) }
    public init?(postgresText: String) {
        guard let value = Wrapped(postgresText: postgresText) else { return nil }
        self = .some(value)
    }
}

extension Date: PostgresEncodable, PostgresDecodable {
    /// ISO 8601 with microseconds, UTC; `infinity` or `-infinity` for an infinite date.
    public var postgresText: String { PostgresTimestamp.format(self) }
    /// Refuses a date before year 1, after year 293,000 (the microseconds since 1970 no longer
    /// fit in 64 bits) or not a number, before anything is sent.
    public func checkedPostgresText() throws -> String {
        guard PostgresTimestamp.canFormat(self) else {
            throw PostgresError(code: .datetimeFieldOverflow,
                                message: "a Date before year 1, after year 293000 or not a number cannot be sent as a timestamp; nothing was sent")
        }
        return postgresText
    }
    /// Reads `timestamptz` as PostgreSQL prints it (ISO DateStyle), e.g. `2026-10-03 09:15:27.12+00`.
    public init?(postgresText: String) {
        guard let date = PostgresTimestamp.parse(postgresText) else { return nil }
        self = date
    }
}

/// Converts between `Date` and PostgreSQL's ISO timestamp text.
public enum PostgresTimestamp {
    /// Whether `format` gives a text PostgreSQL reads as `date`: years 1 to about 293,000, and
    /// the infinities.
    public static func canFormat(_ date: Date) -> Bool {
        let seconds = date.timeIntervalSince1970
        return seconds.isInfinite || (seconds >= -62_135_596_800 && seconds < microsecondsFitBelow)
    }

    /// Seconds since 1970 (either way) whose microseconds still fit in 64 bits (about year 293,000).
    private static let microsecondsFitBelow = 9.2e12

    /// The date as `YYYY-MM-DDTHH:MM:SS.ffffffZ`; `infinity`, `-infinity`; where `canFormat` is
    /// false, a text PostgreSQL refuses (`NaN`, or a year it cannot read) rather than a trap.
    public static func format(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970
        guard interval.isFinite else { return interval.isNaN ? "NaN" : interval > 0 ? "infinity" : "-infinity" }
        guard abs(interval) < microsecondsFitBelow else { return "out of range" }
        let micros = (interval * 1_000_000).rounded()
        let seconds = Int64((micros / 1_000_000).rounded(.down))
        let fraction = Int64(micros) - seconds * 1_000_000
        let days = Int((Double(seconds) / 86_400).rounded(.down))
        let secondOfDay = Int(seconds - Int64(days) * 86_400)
        let (y, m, d) = civilFromDays(days)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", y, m, d,
            secondOfDay / 3600, secondOfDay / 60 % 60, secondOfDay % 60, fraction
        )
    }

    /// Parses `YYYY-MM-DD[ T]HH:MM:SS[.ffffff][Z|±HH[:MM]]` (a year of 4 to 6 digits), and
    /// `infinity` and `-infinity`.
    public static func parse(_ text: String) -> Date? {
        if text == "infinity" || text == "-infinity" { return Date(timeIntervalSince1970: text == "infinity" ? .infinity : -.infinity) }
        let bytes = Array(text.utf8)
        var index = 0
        func number(_ count: Int) -> Int? {
            guard index + count <= bytes.count else { return nil }
            var value = 0
            for _ in 0..<count {
                let b = bytes[index]
                guard b >= 48 && b <= 57 else { return nil }
                value = value * 10 + Int(b - 48)
                index += 1
            }
            return value
        }
        func expect(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }
        // Years past 9999 have more digits.
        let yearDigits = bytes.prefix(while: { $0 >= 48 && $0 <= 57 }).count
        guard (4...6).contains(yearDigits), let year = number(yearDigits), expect(45), let month = number(2), expect(45),
              let day = number(2) else { return nil }
        guard index < bytes.count, bytes[index] == 32 || bytes[index] == 84 else { return nil }
        index += 1
        guard let hour = number(2), expect(58), let minute = number(2), expect(58), let second = number(2) else { return nil }
        var fraction = 0.0
        if index < bytes.count, bytes[index] == 46 {
            index += 1
            var scale = 0.1
            while index < bytes.count, bytes[index] >= 48 && bytes[index] <= 57 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        var offset = 0
        if index < bytes.count {
            let sign = bytes[index]
            index += 1
            if sign == 90 { // Z
            } else if sign == 43 || sign == 45 {
                guard let oh = number(2) else { return nil }
                var om = 0
                if index < bytes.count {
                    _ = expect(58)
                    guard let m = number(2) else { return nil }
                    om = m
                }
                offset = (oh * 3600 + om * 60) * (sign == 45 ? -1 : 1)
            } else {
                return nil
            }
        }
        guard index == bytes.count else { return nil }
        let days = daysFromCivil(year, month, day)
        let seconds = Double(days) * 86_400 + Double(hour * 3600 + minute * 60 + second - offset) + fraction
        return Date(timeIntervalSince1970: seconds)
    }

    // Howard Hinnant's civil calendar algorithms (proleptic Gregorian).
    static func daysFromCivil(_ year: Int, _ month: Int, _ day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civilFromDays(_ days: Int) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
