import Foundation

/// Expands a panel's raw SQL the way Grafana's PostgreSQL data source does before it runs it:
/// first the template variables (the browser, with the SQL data sources' quoting), then
/// `$__interval`, `$__interval_ms`, `$__unixEpochFrom()` and `$__unixEpochTo()`, then the macros
/// (`$__timeFilter`, `$__timeFrom()`, `$__timeTo()`, `$__timeGroup`, `$__timeGroupAlias`,
/// `$__time`, `$__timeEpoch`, `$__unixEpochFilter`).
///
///     let query = GrafanaQuery(from: start, to: end, interval: 3600, variables: ["app": .all(["a", "b"])])
///     let sql = try query.expand("select ... where $__timeFilter(day) and app in ($app)")
///
/// Follows `pkg/tsdb/grafana-postgresql-datasource/macros.go`, `pkg/tsdb/sqleng` and the SQL data
/// sources' `interpolateVariable` in Grafana 10-11; an unknown macro is an error there and here.
public struct GrafanaQuery: Sendable {
    /// The value of a dashboard variable as the user selected it.
    public struct Variable: Sendable, Equatable {
        public var values: [String]
        /// Multi-value or with an "All" option: Grafana then quotes even a single value.
        public var quotesSingleValue: Bool

        /// "All" of a variable with a custom all value: that text, inserted as written (Grafana
        /// neither quotes nor escapes it, whatever the format).
        public var customAllValue: String?

        public init(values: [String], quotesSingleValue: Bool, customAllValue: String? = nil) {
            self.values = values
            self.quotesSingleValue = quotesSingleValue
            self.customAllValue = customAllValue
        }

        /// "All" selected: the custom all value if the variable has one, else every option's value.
        public static func all(_ options: [String], allValue: String? = nil) -> Variable {
            Variable(values: options, quotesSingleValue: true, customAllValue: allValue)
        }
    }

    public var from: Date
    public var to: Date
    /// `$__interval` in seconds (Grafana derives it from the range and the panel width).
    public var interval: Double
    public var variables: [String: Variable]

    public init(from: Date, to: Date, interval: Double, variables: [String: Variable] = [:]) {
        self.from = from
        self.to = to
        self.interval = interval
        self.variables = variables
    }

    public func expand(_ sql: String) throws -> String {
        try expandMacros(expandGlobals(try expandVariables(sql)))
    }

    // MARK: 1. Template variables

    /// `$name`, `${name}`, `${name:format}` and `[[name]]`; names Grafana does not know stay as written.
    func expandVariables(_ sql: String) throws -> String {
        let pattern = #"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?::([^\}]+))?\}"#
        return try Self.replace(pattern, in: sql) { groups in
            let name = groups[1] ?? groups[2] ?? groups[4] ?? ""
            let format = groups[3] ?? groups[5]
            if name == "__interval" { return GrafanaQuery.formatInterval(interval) }
            if name == "__interval_ms" { return String(Int64((interval * 1000).rounded())) }
            guard let variable = variables[name] else { return nil }
            return try Self.format(variable, as: format, name: name)
        }
    }

    static func format(_ variable: Variable, as format: String?, name: String) throws -> String {
        if let custom = variable.customAllValue {
            guard format == nil || ["sqlstring", "singlequote", "csv", "raw"].contains(format!) else {
                throw GrafanaQueryError("variable '\(name)': format '\(format!)' is not supported")
            }
            return custom
        }
        let quoted = variable.values.map { "'" + $0.replacingOccurrences(of: "'", with: "''") + "'" }
        switch format {
        case nil:
            if variable.values.count == 1 && !variable.quotesSingleValue {
                return variable.values[0].replacingOccurrences(of: "'", with: "''")
            }
            return quoted.joined(separator: ",")
        case "sqlstring", "singlequote": return quoted.joined(separator: ",")
        case "csv": return variable.values.joined(separator: ",")
        case "raw": return variable.values.joined(separator: ",")
        case let other?: throw GrafanaQueryError("variable '\(name)': format '\(other)' is not supported")
        }
    }

    // MARK: 2. Global substitutions of the SQL data sources

    func expandGlobals(_ sql: String) -> String {
        sql.replacingOccurrences(of: "$__interval_ms", with: String(Int64((interval * 1000).rounded())))
            .replacingOccurrences(of: "$__interval", with: Self.formatInterval(interval))
            .replacingOccurrences(of: "$__unixEpochFrom()", with: String(Int64(from.timeIntervalSince1970.rounded(.down))))
            .replacingOccurrences(of: "$__unixEpochTo()", with: String(Int64(to.timeIntervalSince1970.rounded(.down))))
    }

    // MARK: 3. Macros

    func expandMacros(_ sql: String) throws -> String {
        try Self.replace(#"\$([_a-zA-Z0-9]+)\(([^\)]*)\)"#, in: sql) { groups in
            var name = groups[1] ?? ""
            let whole = groups[0] ?? ""
            // Grafana treats `$__timeGroup(...)` directly followed by ',' as the aliased form
            // (pre-5.3 dashboards); it looks at the first occurrence of the same text.
            if name == "__timeGroup", let range = sql.range(of: whole), sql[range.upperBound...].first == "," {
                name = "__timeGroupAlias"
            }
            let arguments = (groups[2] ?? "").split(separator: ",", omittingEmptySubsequences: false)
                .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " ")) }
            return try macro(name, arguments)
        }
    }

    func macro(_ name: String, _ arguments: [String]) throws -> String {
        let column = arguments.first ?? ""
        func requireColumn() throws {
            if column.isEmpty { throw GrafanaQueryError("missing time column argument for macro \(name)") }
        }
        switch name {
        case "__time":
            try requireColumn()
            return "\(column) AS \"time\""
        case "__timeEpoch":
            try requireColumn()
            return "extract(epoch from \(column)) as \"time\""
        case "__timeFilter":
            try requireColumn()
            return "\(column) BETWEEN '\(Self.rfc3339(from))' AND '\(Self.rfc3339(to))'"
        case "__timeFrom":
            return "'\(Self.rfc3339(from))'"
        case "__timeTo":
            return "'\(Self.rfc3339(to))'"
        case "__timeGroup", "__timeGroupAlias":
            guard arguments.count == 2 else {
                // A third argument is a fill mode, which changes the returned frame; none of ours uses one.
                throw GrafanaQueryError("macro \(name) needs a time column and an interval (fill modes are not supported here)")
            }
            let seconds = Self.goFloat(try Self.parseInterval(arguments[1].trimmingCharacters(in: CharacterSet(charactersIn: "'"))))
            let group = "floor(extract(epoch from \(column))/\(seconds))*\(seconds)"
            return name == "__timeGroup" ? group : group + " AS \"time\""
        case "__unixEpochFilter":
            try requireColumn()
            let start = Int64(from.timeIntervalSince1970.rounded(.down)), end = Int64(to.timeIntervalSince1970.rounded(.down))
            return "\(column) >= \(start) AND \(column) <= \(end)"
        default:
            throw GrafanaQueryError("unknown macro \"\(name)\"")
        }
    }

    // MARK: Formats

    /// Go's `time.RFC3339Nano` of a UTC time: fractional seconds without trailing zeros.
    static func rfc3339(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.formatOptions = [.withInternetDateTime]
        var text = formatter.string(from: date)
        let nanos = Int64(((date.timeIntervalSince1970 - date.timeIntervalSince1970.rounded(.down)) * 1e9).rounded())
        if nanos > 0 && nanos < 1_000_000_000 {
            var fraction = String(format: "%09lld", nanos)
            while fraction.hasSuffix("0") { fraction.removeLast() }
            text.insert(contentsOf: "." + fraction, at: text.index(before: text.endIndex))
        }
        return text
    }

    /// Grafana's `gtime.ParseInterval` for the units panels use: ms, s, m, h, d, w.
    static func parseInterval(_ text: String) throws -> Double {
        let digits = text.prefix { $0.isNumber }
        let unit = text.dropFirst(digits.count)
        let units: [Substring: Double] = ["ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604_800]
        guard let count = Double(digits), let factor = units[unit] else {
            throw GrafanaQueryError("error parsing interval \(text)")
        }
        return count * factor
    }

    /// Grafana's `gtime.FormatInterval`: the largest whole unit (y, d, h, m, s, ms).
    static func formatInterval(_ seconds: Double) -> String {
        let milliseconds = Int64((seconds * 1000).rounded(.down))
        for (unit, size) in [("y", Int64(365 * 86_400_000)), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)]
        where milliseconds >= size {
            return "\(milliseconds / size)\(unit)"
        }
        return "1ms"
    }

    /// Go's `%v` of a float64: the shortest digits, in exponent form when the exponent is below
    /// -4 or at least 6 (`2592000` prints `2.592e+06`).
    static func goFloat(_ value: Double) -> String {
        if value == 0 { return "0" }
        // Swift's description also prints the shortest digits that read back the same value.
        var text = "\(abs(value))"
        var exponent = 0
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            exponent = Int(text[text.index(after: e)...])!
            text = String(text[..<e])
        }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        let integer = String(parts[0]), fraction = parts.count > 1 ? String(parts[1]) : ""
        var digits = integer + fraction
        var point = integer.count + exponent
        while digits.hasPrefix("0") && digits.count > 1 { digits.removeFirst(); point -= 1 }
        while digits.hasSuffix("0") && digits.count > 1 { digits.removeLast() }
        let sign = value < 0 ? "-" : ""
        let decimalExponent = point - 1
        if decimalExponent < -4 || decimalExponent >= 6 {
            let mantissa = digits.count > 1 ? String(digits.first!) + "." + digits.dropFirst() : digits
            let magnitude = abs(decimalExponent)
            return sign + mantissa + "e" + (decimalExponent < 0 ? "-" : "+") + (magnitude < 10 ? "0" : "") + String(magnitude)
        }
        if point <= 0 { return sign + "0." + String(repeating: "0", count: -point) + digits }
        if point >= digits.count { return sign + digits + String(repeating: "0", count: point - digits.count) }
        return sign + digits.prefix(point) + "." + digits.dropFirst(point)
    }

    /// Replaces every match of `pattern`; `body` gets the capture groups (nil when a group did
    /// not take part) and returns the replacement, or nil to keep the match as written.
    static func replace(_ pattern: String, in text: String, _ body: ([String?]) throws -> String?) throws -> String {
        let regex = try NSRegularExpression(pattern: pattern)
        let source = text as NSString
        var result = ""
        var last = 0
        for match in regex.matches(in: text, range: NSRange(location: 0, length: source.length)) {
            let groups: [String?] = (0..<match.numberOfRanges).map { index in
                let range = match.range(at: index)
                return range.location == NSNotFound ? nil : source.substring(with: range)
            }
            result += source.substring(with: NSRange(location: last, length: match.range.location - last))
            result += try body(groups) ?? source.substring(with: match.range)
            last = match.range.location + match.range.length
        }
        return result + source.substring(from: last)
    }
}

public struct GrafanaQueryError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

extension GrafanaQuery {
    /// `$__interval` for a panel of about `maxDataPoints` points: the range divided by the
    /// points in whole seconds, at least the panel's minimum interval. (Grafana then rounds it to
    /// a nearby "nice" interval; the SQL is the same shape either way.)
    public static func interval(from: Date, to: Date, minInterval: String?, maxDataPoints: Int = 1000) throws -> Double {
        let byWidth = max(1, (to.timeIntervalSince(from) / Double(maxDataPoints)).rounded(.down))
        guard let minInterval else { return byWidth }
        return max(byWidth, try parseInterval(minInterval))
    }

    /// The query of one panel target with every variable at the given selections.
    public static func forTarget(_ target: Dashboard.Target, from: Date, to: Date, variables: [String: Variable]) throws -> GrafanaQuery {
        GrafanaQuery(from: from, to: to, interval: try interval(from: from, to: to, minInterval: target.minInterval), variables: variables)
    }
}
