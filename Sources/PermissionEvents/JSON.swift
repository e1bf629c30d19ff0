/// A parsed JSON value. Objects keep their members in input order; the parser keeps one member
/// per key, the last value given (as PostgreSQL's `jsonb` does).
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    /// A number, kept as its source text (RFC 8259 grammar, already checked).
    case number(String)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    /// Equality as PostgreSQL's `jsonb` has it, which decides whether a re-sent event is a
    /// duplicate or a conflict: strings and keys equal byte for byte (not by Swift's canonical
    /// equivalence: "é" and "e\u{301}" differ), numbers by exact decimal value (`1.0` equals `1`,
    /// `9007199254740993` does not equal `9007199254740992`), members in any order.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.number(a), .number(b)): return a == b || Decimal(json: a).map { $0 == Decimal(json: b) } ?? false
        case let (.string(a), .string(b)): return a.utf8.elementsEqual(b.utf8)
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && a.allSatisfy { member in
                b.contains { $0.key.utf8.elementsEqual(member.key.utf8) && $0.value == member.value }
            }
        default: return false
        }
    }

    /// The member `key` of an object (the last one, as PostgreSQL's jsonb keeps; keys compared
    /// byte for byte); nil otherwise.
    public subscript(key: String) -> JSONValue? {
        guard case let .object(members) = self else { return nil }
        return members.last { $0.key.utf8.elementsEqual(key.utf8) }?.value
    }

    /// A JSON number's exact value: its significant digits and the power of ten of the last
    /// one (zero has no digits, whatever its sign). nil for an exponent out of `Int`'s range.
    private struct Decimal: Equatable {
        var negative = false
        var digits: [UInt8] = []
        var exponent = 0

        init?(json text: String) {
            var bytes = Substring(text).utf8[...]
            if bytes.first == UInt8(ascii: "-") { negative = true; bytes = bytes.dropFirst() }
            var fractionDigits = 0
            var inFraction = false
            while let byte = bytes.first, byte != UInt8(ascii: "e"), byte != UInt8(ascii: "E") {
                bytes = bytes.dropFirst()
                if byte == UInt8(ascii: ".") { inFraction = true; continue }
                if digits.isEmpty && byte == UInt8(ascii: "0") { if inFraction { fractionDigits += 1 }; continue }
                digits.append(byte)
                if inFraction { fractionDigits += 1 }
            }
            var power = 0
            if !bytes.isEmpty {
                guard let value = Int(String(decoding: bytes.dropFirst(), as: UTF8.self)) else { return nil }
                power = value
            }
            while digits.last == UInt8(ascii: "0") { digits.removeLast(); fractionDigits -= 1 }
            guard !digits.isEmpty else { negative = false; return }
            let (shifted, overflow) = power.subtractingReportingOverflow(fractionDigits)
            guard !overflow else { return nil }
            exponent = shifted
        }
    }

    public var stringValue: String? {
        if case let .string(s) = self { return s }
        return nil
    }

    /// How deeply objects and arrays nest in the value (a scalar: 0, `{}`: 1).
    public var depth: Int {
        switch self {
        case let .array(items): return 1 + (items.map(\.depth).max() ?? 0)
        case let .object(members): return 1 + (members.map(\.value.depth).max() ?? 0)
        default: return 0
        }
    }
}

/// Why a text is not acceptable JSON.
public struct JSONSyntaxError: Error, Equatable, Sendable, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    /// The text nests deeper than the parser's limit (a limit of the contract, not a syntax error).
    public var isTooDeep = false
    public var description: String { "\(reason) at byte \(offset + 1)" }

    public init(offset: Int, reason: String, isTooDeep: Bool = false) {
        self.offset = offset
        self.reason = reason
        self.isTooDeep = isTooDeep
    }

    /// The reason given for a value nested deeper than `limit` levels.
    public static func tooDeep(_ limit: Int) -> String { "nesting deeper than \(limit) levels" }
}

/// A strict RFC 8259 parser over UTF-8 bytes (throws `JSONSyntaxError`): rejects invalid UTF-8, lone surrogates,
/// trailing data, and nesting deeper than `maxDepth`.
public struct JSONParser {
    public static let defaultMaxDepth = 16

    public static func parse(_ text: String, maxDepth: Int = defaultMaxDepth) throws -> JSONValue {
        var copy = text
        return try copy.withUTF8 { bytes in try parse(bytes: bytes, maxDepth: maxDepth) }
    }

    public static func parse(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int = defaultMaxDepth) throws -> JSONValue {
        try parseSized(bytes: bytes, maxDepth: maxDepth).value
    }

    /// A value with the bytes it spans as sent, from its first byte to its last (the whitespace
    /// around it not counted, the whitespace inside counted), and, for an array, each element's.
    public struct Sized {
        public var value: JSONValue
        public var sentLength: Int
        public var elementSentLengths: [Int]
    }

    public static func parseSized(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int = defaultMaxDepth) throws -> Sized {
        guard validUTF8(bytes) else {
            throw JSONSyntaxError(offset: firstInvalidUTF8(bytes), reason: "invalid UTF-8")
        }
        var parser = JSONParser(bytes: bytes, maxDepth: maxDepth)
        parser.skipWhitespace()
        let start = parser.index
        let value = try parser.parseValue(depth: 1)
        let length = parser.index - start
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.error("unexpected data after the JSON value") }
        return Sized(value: value, sentLength: length, elementSentLengths: parser.topLevelElementLengths)
    }

    private let bytes: UnsafeBufferPointer<UInt8>
    private let maxDepth: Int
    private var index = 0
    private var topLevelElementLengths: [Int] = []

    private init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    private func error(_ reason: String) -> JSONSyntaxError { JSONSyntaxError(offset: index, reason: reason) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue(depth: Int) throws -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    private mutating func literal(_ word: StaticString) throws {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw error("invalid literal") }
        let expected = UnsafeBufferPointer(start: word.utf8Start, count: count)
        for offset in 0..<count where bytes[index + offset] != expected[offset] {
            throw error("invalid literal")
        }
        index += count
    }

    private mutating func parseObject(depth: Int) throws -> JSONValue {
        guard depth <= maxDepth else { throw JSONSyntaxError(offset: index, reason: JSONSyntaxError.tooDeep(maxDepth), isTooDeep: true) }
        index += 1
        var members: [(key: String, value: JSONValue)] = []
        var keys: [[UInt8]: Int]? = nil
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            let value = try parseValue(depth: depth + 1)
            if let earlier = Self.index(of: key, in: members, keys: &keys) {
                members[earlier].value = value  // a repeated key: the last value counts
            } else {
                members.append((key, value))
            }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            throw error("expected ',' or '}'")
        }
    }

    /// Where `key` already is among `members`, compared byte by byte as `jsonb` compares keys (Swift
    /// strings compare canonically equivalent texts equal); an index of the keys once there are many.
    private static func index(of key: String, in members: [(key: String, value: JSONValue)], keys: inout [[UInt8]: Int]?) -> Int? {
        if keys == nil && members.count < 16 {
            return members.firstIndex { $0.key.utf8.elementsEqual(key.utf8) }
        }
        if keys == nil {
            keys = Dictionary(members.enumerated().map { (Array($0.element.key.utf8), $0.offset) }, uniquingKeysWith: { first, _ in first })
        }
        let bytes = Array(key.utf8)
        if let found = keys?[bytes] { return found }
        keys?[bytes] = members.count  // where the caller appends it
        return nil
    }

    private mutating func parseArray(depth: Int) throws -> JSONValue {
        guard depth <= maxDepth else { throw JSONSyntaxError(offset: index, reason: JSONSyntaxError.tooDeep(maxDepth), isTooDeep: true) }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            skipWhitespace()
            let start = index
            elements.append(try parseValue(depth: depth + 1))
            if depth == 1 { topLevelElementLengths.append(index - start) }
            skipWhitespace()
            guard index < bytes.count else { throw error("unexpected end of input") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            throw error("expected ',' or ']'")
        }
    }

    private mutating func parseNumber() throws -> String {
        let start = index
        func digits() -> Int {
            let from = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            return index - from
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error("invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits() == 0 {
            throw error("invalid number")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw error("invalid number") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw error("invalid number") }
        }
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
    }

    private mutating func parseString() throws -> String {
        index += 1
        let start = index
        // Fast path: no escapes.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("control character in string") }
            index += 1
        }
        var scalars = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return String(decoding: scalars, as: UTF8.self)
            }
            if byte < 0x20 { throw error("control character in string") }
            if byte != UInt8(ascii: "\\") {
                scalars.append(byte)
                index += 1
                continue
            }
            index += 1
            guard index < bytes.count else { break }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""): scalars.append(0x22)
            case UInt8(ascii: "\\"): scalars.append(0x5C)
            case UInt8(ascii: "/"): scalars.append(0x2F)
            case UInt8(ascii: "b"): scalars.append(0x08)
            case UInt8(ascii: "f"): scalars.append(0x0C)
            case UInt8(ascii: "n"): scalars.append(0x0A)
            case UInt8(ascii: "r"): scalars.append(0x0D)
            case UInt8(ascii: "t"): scalars.append(0x09)
            case UInt8(ascii: "u"):
                var code = try hex4()
                if (0xD800...0xDBFF).contains(code) {
                    guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                        throw error("lone surrogate in \\u escape")
                    }
                    index += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw error("lone surrogate in \\u escape") }
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(code) {
                    throw error("lone surrogate in \\u escape")
                }
                scalars.append(contentsOf: Array(String(Unicode.Scalar(code)!).utf8))
            default:
                throw error("invalid escape")
            }
        }
        throw error("unterminated string")
    }

    private mutating func hex4() throws -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("invalid \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case 0x30...0x39: digit = UInt32(byte - 0x30)
            case 0x41...0x46: digit = UInt32(byte - 0x41 + 10)
            case 0x61...0x66: digit = UInt32(byte - 0x61 + 10)
            default: throw error("invalid \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    private static func validUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        firstInvalidUTF8(bytes) == bytes.count
    }

    /// Offset of the first byte of an invalid UTF-8 sequence, or `bytes.count` when all is valid.
    private static func firstInvalidUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var i = 0
        let n = bytes.count
        while i < n {
            let b = bytes[i]
            if b < 0x80 { i += 1; continue }
            var need = 0
            var minimum: UInt32 = 0
            var code: UInt32 = 0
            switch b {
            case 0xC2...0xDF: need = 1; code = UInt32(b & 0x1F); minimum = 0x80
            case 0xE0...0xEF: need = 2; code = UInt32(b & 0x0F); minimum = 0x800
            case 0xF0...0xF4: need = 3; code = UInt32(b & 0x07); minimum = 0x10000
            default: return i
            }
            guard i + need < n else { return i }
            for k in 1...need {
                let c = bytes[i + k]
                guard c & 0xC0 == 0x80 else { return i }
                code = code << 6 | UInt32(c & 0x3F)
            }
            if code < minimum || code > 0x10FFFF || (0xD800...0xDFFF).contains(code) { return i }
            i += need + 1
        }
        return n
    }
}

extension JSONValue {
    /// Length in bytes of this value written as compact JSON: no whitespace between tokens,
    /// strings escaped as PostgreSQL's `jsonb` prints them, duplicate keys dropped (the last one
    /// kept), numbers as PostgreSQL's `numeric` prints them (`2e3` as `2000`). The size rule
    /// measures this here and in the database (`audit.compact_json_length`).
    public var compactTextLength: Int {
        switch self {
        case .null: return 4
        case let .bool(b): return b ? 4 : 5
        case let .number(text): return JSONValue.numericLength(text)
        case let .string(s): return JSONValue.quotedLength(s)
        case let .array(elements):
            return 2 + elements.reduce(0) { $0 + $1.compactTextLength } + max(0, elements.count - 1)
        case let .object(members):
            var seen = Set<[UInt8]>()  // jsonb compares keys byte by byte, not as Swift strings
            var total = 2
            var count = 0
            for member in members.reversed() where seen.insert(Array(member.key.utf8)).inserted {
                total += JSONValue.quotedLength(member.key) + 1 + member.value.compactTextLength
                count += 1
            }
            return total + max(0, count - 1)
        }
    }

    /// The length of `numeric`'s text for a JSON number: the integer digits without leading
    /// zeros (at least one), and as many fraction digits as written less the exponent. An exponent
    /// that `numeric` refuses (±1,073,741,823 and beyond) counts as longer than any event may be.
    static func numericLength(_ text: String) -> Int {
        let parts = text.split(whereSeparator: { $0 == "e" || $0 == "E" })
        guard let exponent = parts.count > 1 ? Int(parts[1]) : 0, exponent.magnitude < 1_073_741_823 else { return Int(Int32.max) }
        var mantissa = Substring(parts[0])
        let negative = mantissa.hasPrefix("-")
        if negative { mantissa = mantissa.dropFirst() }
        let point = mantissa.firstIndex(of: ".")
        let integerDigits = point.map { mantissa[..<$0].count } ?? mantissa.count
        let fractionDigits = point.map { mantissa[$0...].count - 1 } ?? 0
        let digits = Array(mantissa.utf8.filter { $0 != UInt8(ascii: ".") })
        let scale = max(0, fractionDigits - exponent)
        let pointAt = integerDigits + exponent  // digits before the decimal point
        let firstNonZero = digits.firstIndex { $0 != UInt8(ascii: "0") }  // nil for zero, printed unsigned
        let integerLength = firstNonZero.map { $0 < pointAt ? pointAt - $0 : 1 } ?? 1
        return (negative && firstNonZero != nil ? 1 : 0) + integerLength + (scale > 0 ? 1 + scale : 0)
    }

    static func quotedLength(_ s: String) -> Int {
        var length = 2
        for byte in s.utf8 {
            switch byte {
            case 0x22, 0x5C, 0x08, 0x0C, 0x0A, 0x0D, 0x09: length += 2
            case 0..<0x20: length += 6
            default: length += 1
            }
        }
        return length
    }
}
