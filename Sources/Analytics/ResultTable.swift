import Foundation
import PermissionEvents

/// A small table of results, rendered as aligned text, CSV or JSON.
public struct ResultTable: Sendable {
    public enum Cell: Sendable, Equatable {
        case text(String)
        case integer(Int)
        case number(Double)
        case null

        /// For people: numbers to 4 decimals, or in scientific notation when that would show a
        /// number other than zero as 0.0000 (a p-value of 2.4e-07).
        public var plain: String {
            switch self {
            case let .number(d) where d != 0 && abs(d) < 0.00005: return String(format: "%.1e", d)
            case let .number(d): return d.isFinite ? String(format: "%.4f", d) : ""
            default: return exact
            }
        }

        /// For programs (CSV): numbers with every digit (the shortest text that reads back as
        /// the same double), so that a p-value of 2e-18 is not written as 0.
        public var exact: String {
            switch self {
            case let .text(s): return s
            case let .integer(i): return String(i)
            case let .number(d): return d.isFinite ? String(d) : ""
            case .null: return ""
            }
        }

        public var json: String {
            switch self {
            case let .text(s):
                var out = ""
                JSONValue.writeQuoted(s, to: &out)
                return out
            case .null: return "null"
            case let .number(d) where !d.isFinite: return "null"
            default: return exact
            }
        }
    }

    public var title: String
    public var columns: [String]
    public var rows: [[Cell]]

    public init(title: String, columns: [String], rows: [[Cell]] = []) {
        self.title = title
        self.columns = columns
        self.rows = rows
    }

    /// The index of a column by name.
    public func column(_ name: String) -> Int? { columns.firstIndex(of: name) }

    /// The numeric value of a cell (integers too), nil for text and null.
    public func number(_ row: Int, _ column: String) -> Double? {
        guard let index = self.column(column) else { return nil }
        switch rows[row][index] {
        case let .integer(i): return Double(i)
        case let .number(d): return d
        default: return nil
        }
    }

    public enum Format: String, CaseIterable, Sendable { case table, csv, json }

    /// Aligned columns under the title, for a terminal. Control characters in text (which a
    /// client may send in an app version or a variant name) show as `\u{1B}` (see `visible`).
    public var text: String {
        let cells = rows.map { $0.map { Self.visible($0.plain) } }
        let widths = columns.indices.map { i in max(columns[i].count, cells.map { $0[i].count }.max() ?? 0) }
        func line(_ values: [String]) -> String {
            // Only trailing blanks go: an empty first cell keeps its column.
            String(values.enumerated().map { i, v in v.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ").reversed().drop(while: { $0 == " " }).reversed())
        }
        var out = "\(Self.visible(title))\n" + line(columns) + "\n" + line(widths.map { String(repeating: "-", count: $0) }) + "\n"
        for row in cells { out += line(row) + "\n" }
        if rows.isEmpty { out += "(no data for this selection)\n" }
        return out
    }

    public var csv: String {
        func field(_ s: String) -> String {
            s.unicodeScalars.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
        }
        return ([columns.map(field).joined(separator: ",")] + rows.map { $0.map { field($0.exact) }.joined(separator: ",") })
            .joined(separator: "\n") + "\n"
    }

    /// `{"title": ..., "rows": [{column: value, ...}, ...]}` on one line.
    public var json: String {
        let objects = rows.map { row in
            "{" + zip(columns, row).map { "\(Cell.text($0).json):\($1.json)" }.joined(separator: ",") + "}"
        }
        return "{\"title\":\(Cell.text(title).json),\"rows\":[" + objects.joined(separator: ",") + "]}"
    }

    /// Several tables as one document: aligned text tables (and CSV blocks) separated by an
    /// empty line; for JSON, one array of the tables' objects.
    public static func render(_ tables: [ResultTable], _ format: Format) -> String {
        switch format {
        case .table: return tables.map(\.text).joined(separator: "\n")
        case .csv: return tables.map(\.csv).joined(separator: "\n")
        case .json: return "[" + tables.map(\.json).joined(separator: ",") + "]\n"
        }
    }
}

extension ResultTable {
    /// `s` with its control characters (C0, DEL, C1) and bidirectional controls (U+061C,
    /// U+200E, U+200F, U+202A-U+202E, U+2066-U+2069, which reorder the text around them) written
    /// as `\u{1B}`, `\u{202E}`: text from a client must not move the cursor, rewrite the screen
    /// or show itself in another order.
    public static func visible(_ s: String) -> String {
        func isControl(_ c: Unicode.Scalar) -> Bool { c.properties.generalCategory == .control || c.properties.isBidiControl }
        guard s.unicodeScalars.contains(where: isControl) else { return s }
        return s.unicodeScalars.map { isControl($0) ? "\\u{\(String($0.value, radix: 16, uppercase: true))}" : String($0) }.joined()
    }
}
