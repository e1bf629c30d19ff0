import Foundation
import PermissionEvents

/// A small table of results, rendered as aligned text, CSV or JSON.
public struct ResultTable: Sendable {
    public enum Cell: Sendable, Equatable {
        case text(String)
        case integer(Int)
        case number(Double)
        case null

        public var plain: String {
            switch self {
            case let .text(s): return s
            case let .integer(i): return String(i)
            case let .number(d): return d.isFinite ? String(format: "%.4f", d) : ""
            case .null: return ""
            }
        }

        public var json: String {
            switch self {
            case let .text(s):
                var out = ""
                JSONValue.writeQuoted(s, to: &out)
                return out
            case let .integer(i): return String(i)
            case let .number(d): return d.isFinite ? String(format: "%.6g", d) : "null"
            case .null: return "null"
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

    public func render(_ format: Format) -> String {
        switch format {
        case .table: return text
        case .csv: return csv
        case .json: return json
        }
    }

    var text: String {
        let cells = rows.map { $0.map(\.plain) }
        let widths = columns.indices.map { i in max(columns[i].count, cells.map { $0[i].count }.max() ?? 0) }
        func line(_ values: [String]) -> String {
            values.enumerated().map { i, v in v.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }
        var out = "\(title)\n" + line(columns) + "\n" + line(widths.map { String(repeating: "-", count: $0) }) + "\n"
        for row in cells { out += line(row) + "\n" }
        if rows.isEmpty { out += "(no data for this selection)\n" }
        return out
    }

    public var csv: String {
        func field(_ s: String) -> String {
            s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" }) ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
        }
        return ([columns.map(field).joined(separator: ",")] + rows.map { $0.map { field($0.plain) }.joined(separator: ",") })
            .joined(separator: "\n") + "\n"
    }

    var json: String {
        let objects = rows.map { row in
            "{" + zip(columns, row).map { "\(Cell.text($0).json):\($1.json)" }.joined(separator: ",") + "}"
        }
        return "{\"title\":\(Cell.text(title).json),\"rows\":[" + objects.joined(separator: ",") + "]}\n"
    }
}
