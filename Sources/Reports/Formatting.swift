import Analytics
import Foundation

/// How a report table reads to a person: rates as percentages with their interval in one cell,
/// p-values rounded, empty cells as a dash.
struct DisplayTable {
    var headers: [String]
    var rows: [[String]]

    init(_ table: ResultTable) {
        var plan: [(header: String, cell: ([ResultTable.Cell]) -> String)] = []
        var consumed: Set<String> = []
        for (index, name) in table.columns.enumerated() where !consumed.contains(name) {
            let base = Self.intervalBase(name)
            if let low = table.column(base + "_low"), let high = table.column(base + "_high") {
                consumed.formUnion([base + "_low", base + "_high"])
                // A difference of two rates is in percentage points, not a percentage of one.
                let show: (Double) -> String = name.hasPrefix("difference") ? { Self.points($0) } : { Self.percent($0) }
                plan.append((Self.header(name), { row in
                    guard let value = row[index].double else { return "–" }
                    let text = show(value)
                    guard let lo = row[low].double, let hi = row[high].double else { return text }
                    return "\(text) (\(show(lo)) to \(show(hi)))"
                }))
            } else if Self.isProportion(name) {
                plan.append((Self.header(name), { row in row[index].double.map { Self.percent($0, signed: name == "lift") } ?? "–" }))
            } else if name == "p_value" {
                // The z statistic beside its p-value (in the data it is the last column).
                if let z = table.column("z") {
                    consumed.insert("z")
                    plan.append(("z", { row in row[z].double.map { String(format: "%.2f", $0) } ?? "–" }))
                }
                plan.append(("p-value", { row in
                    guard let p = row[index].double else { return "–" }
                    return p < 0.001 ? "< 0.001" : String(format: "%.3f", p)
                }))
            } else {
                plan.append((Self.header(name), { row in
                    let text = row[index].plain
                    return text.isEmpty ? "–" : text
                }))
            }
        }
        headers = plan.map(\.header)
        rows = table.rows.map { row in plan.map { $0.cell(row) } }
    }

    /// The name of the interval columns that belong to a value column.
    static func intervalBase(_ name: String) -> String {
        switch name {
        case "picker_adoption": return "adoption"
        case "denial_rate_at_dialog": return "denial_at_dialog"
        default: return name.hasSuffix("_rate") ? String(name.dropLast(5)) : name
        }
    }

    static func isProportion(_ name: String) -> Bool {
        ["rate", "share", "adoption", "completion", "lift"].contains { name.contains($0) }
    }

    static func header(_ name: String) -> String {
        switch name {
        case "osMajor": return "OS major"
        case "appVersion": return "app version"
        case "too_small": return "too small"
        default: return name.replacingOccurrences(of: "_", with: " ")
        }
    }

    /// A difference of rates in percentage points, signed: "+4.2 pp".
    static func points(_ value: Double) -> String {
        let text = String(format: "%.1f pp", 100 * value)
        return value > 0 ? "+" + text : text
    }

    static func percent(_ value: Double, signed: Bool = false) -> String {
        let text = String(format: "%.1f%%", 100 * value)
        return signed && value > 0 ? "+" + text : text
    }
}

extension ResultTable.Cell {
    var double: Double? {
        switch self {
        case let .integer(i): return Double(i)
        case let .number(d): return d.isFinite ? d : nil
        default: return nil
        }
    }
}

enum HTML {
    /// Text as HTML that shows it literally; control and bidirectional characters (which a
    /// client may send in a variant name) show as `\u{1B}` (`ResultTable.visible`).
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.count)
        for c in ResultTable.visible(text) {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(c)
            }
        }
        return out
    }
}
