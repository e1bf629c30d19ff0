import Analytics
import Foundation

/// Inline SVG charts for the HTML report: no script, no external resource; each chart scales
/// with the page (viewBox) and carries a title for screen readers.
enum SVGChart {
    /// Series colours: the first series (denial) red, the second (grant) green.
    static let palette = ["#d62728", "#2ca02c", "#1f77b4", "#9467bd", "#ff7f0e", "#8c564b"]
    static let stateColours = ["granted": "#2ca02c", "limited": "#98df8a", "denied": "#d62728",
                               "restricted": "#7f7f7f", "notDetermined": "#c7c7c7"]

    static func render(_ chart: Report.Chart, _ table: ResultTable, title: String) -> String? {
        switch chart {
        case let .intervalBars(label, value, low, high, weight):
            return intervalBars(table, label: label, value: value, low: low, high: high, weight: weight, title: title)
        case let .trend(x, series):
            return trend(table, x: x, series: series, title: title)
        case let .stacked(group, part, share):
            return stacked(table, group: group, part: part, share: share, title: title)
        }
    }

    /// Labels longer than this are cut in the middle, keeping both ends (the full text is in the
    /// bar's tooltip and in the table).
    static func shorten(_ text: String, _ limit: Int = 40) -> String {
        guard text.count > limit else { return text }
        let tail = limit * 3 / 5
        return String(text.prefix(limit - tail - 1)) + "…" + String(text.suffix(tail))
    }

    /// A chart's labels, each shortened, and kept apart: labels that would read the same once cut
    /// show, after their first characters, the part where they differ instead of their end; any
    /// still alike after that are numbered (#1, #2...).
    static func shorten(_ texts: [String], _ limit: Int = 40) -> [String] {
        var short = texts.map { shorten($0, limit) }
        func clashes() -> [[Int]] {
            Dictionary(grouping: texts.indices, by: { short[$0] }).values.filter { group in Set(group.map { texts[$0] }).count > 1 }
        }
        for _ in 0..<4 {  // a group split by its first difference may still share a later cut
            let groups = clashes()
            if groups.isEmpty { break }
            for group in groups {
                let characters = group.map { Array(texts[$0]) }
                let common = (0...).first { i in characters.contains { i >= $0.count } || Set(characters.map { $0[i] }).count > 1 }!
                let head = limit / 4, window = limit - head - 2
                for (index, text) in zip(group, characters) {
                    let start = min(max(common - 4, head), max(text.count - window, head))
                    let end = min(start + window, text.count)
                    short[index] = String(text[..<head]) + "…" + String(text[start..<end]) + (end < text.count ? "…" : "")
                }
            }
        }
        for group in clashes() {
            for (n, index) in group.enumerated() {
                let number = " #\(n + 1)"
                short[index] = String(short[index].prefix(limit - number.count)) + number
            }
        }
        return short
    }

    /// An axis from 0 to a round value at or above `high` (at most 100%), with round steps.
    static func scale(_ high: Double) -> (max: Double, step: Double) {
        let top = min(1, max(high, 0.01))
        let step = [0.01, 0.02, 0.05, 0.1, 0.2].first { top / $0 <= 6 } ?? 0.2
        return (min(1, (top / step - 1e-9).rounded(.up) * step), step)
    }

    static func label(_ table: ResultTable, _ row: Int, _ columns: [String]) -> String {
        columns.compactMap { table.column($0).map { table.rows[row][$0].plain } }
            .map { $0.isEmpty ? "(none)" : $0 }.joined(separator: " · ")
    }

    /// Rows to draw: the `limit` heaviest by `weight`, in the table's order.
    static func chosenRows(_ table: ResultTable, value: String, weight: String, limit: Int) -> [Int] {
        let drawable = table.rows.indices.filter { table.number($0, value) != nil }
        let heaviest = drawable.sorted { (table.number($0, weight) ?? 0) > (table.number($1, weight) ?? 0) }.prefix(limit)
        return Set(heaviest).sorted()
    }

    static func intervalBars(_ table: ResultTable, label: [String], value: String, low: String, high: String,
                             weight: String, title: String) -> String? {
        let rows = chosenRows(table, value: value, weight: weight, limit: Report.chartRowLimit)
        guard !rows.isEmpty else { return nil }
        let labelWidth = 290.0, plotWidth = 350.0, rowHeight = 24.0, top = 28.0
        let (scaleMax, step) = scale(rows.compactMap { table.number($0, high) ?? table.number($0, value) }.max() ?? 1)
        let height = top + Double(rows.count) * rowHeight + 24
        func x(_ v: Double) -> Double { labelWidth + plotWidth * min(max(v, 0), scaleMax) / scaleMax }
        var svg = header(width: 720, height: height, title: title)
        for tick in stride(from: 0.0, through: scaleMax + 1e-9, by: step) {
            svg += "<line x1=\"\(f(x(tick)))\" y1=\"\(f(top - 4))\" x2=\"\(f(x(tick)))\" y2=\"\(f(height - 20))\" class=\"grid\"/>"
            svg += "<text x=\"\(f(x(tick)))\" y=\"\(f(height - 6))\" class=\"tick\" text-anchor=\"middle\">\(Int((tick * 100).rounded()))%</text>"
        }
        let hidden = table.rows.count - rows.count
        if hidden > 0 {
            svg += "<text x=\"\(f(labelWidth))\" y=\"16\" class=\"note\">\(rows.count) largest of \(table.rows.count) rows; all rows in the table</text>"
        }
        let labels = rows.map { Self.label(table, $0, label) }
        let shortLabels = shorten(labels)
        for (i, row) in rows.enumerated() {
            let y = top + Double(i) * rowHeight
            let text = labels[i]
            let v = table.number(row, value) ?? 0
            let tooltip = HTML.escape("\(text): \(DisplayTable.percent(v))" + interval(table, row, low, high))
            svg += "<g><title>\(tooltip)</title>"
            svg += "<text x=\"\(f(labelWidth - 8))\" y=\"\(f(y + 15))\" text-anchor=\"end\" class=\"label\">\(HTML.escape(shortLabels[i]))</text>"
            svg += "<rect x=\"\(f(labelWidth))\" y=\"\(f(y + 4))\" width=\"\(f(x(v) - labelWidth))\" height=\"\(f(rowHeight - 8))\" class=\"bar\"/>"
            if let lo = table.number(row, low), let hi = table.number(row, high) {
                let cy = y + rowHeight / 2
                svg += "<path d=\"M\(f(x(lo))),\(f(cy))H\(f(x(hi)))M\(f(x(lo))),\(f(cy - 5))v10M\(f(x(hi))),\(f(cy - 5))v10\" class=\"whisker\"/>"
            }
            svg += "<text x=\"\(f(labelWidth + plotWidth + 8))\" y=\"\(f(y + 15))\" class=\"value\">\(DisplayTable.percent(v))</text></g>"
        }
        return svg + "</svg>"
    }

    static func trend(_ table: ResultTable, x xColumn: String, series: [(name: String, value: String, low: String, high: String)],
                      title: String) -> String? {
        guard let xIndex = table.column(xColumn), !table.rows.isEmpty else { return nil }
        let n = table.rows.count
        let left = 50.0, plotWidth = 600.0, top = 30.0, plotHeight = 200.0
        let (scaleMax, step) = scale(series.flatMap { s in table.rows.indices.compactMap { table.number($0, s.high) } }.max() ?? 1)
        func x(_ i: Int) -> Double { n == 1 ? left + plotWidth / 2 : left + plotWidth * Double(i) / Double(n - 1) }
        func y(_ v: Double) -> Double { top + plotHeight * (1 - min(max(v, 0), scaleMax) / scaleMax) }
        var svg = header(width: 720, height: top + plotHeight + 50, title: title)
        for tick in stride(from: 0.0, through: scaleMax + 1e-9, by: step) {
            svg += "<line x1=\"\(f(left))\" y1=\"\(f(y(tick)))\" x2=\"\(f(left + plotWidth))\" y2=\"\(f(y(tick)))\" class=\"grid\"/>"
            svg += "<text x=\"\(f(left - 6))\" y=\"\(f(y(tick) + 4))\" class=\"tick\" text-anchor=\"end\">\(Int((tick * 100).rounded()))%</text>"
        }
        let every = max(1, Int((Double(n) / 8).rounded(.up)))
        for i in stride(from: 0, to: n, by: every) {
            svg += "<text x=\"\(f(x(i)))\" y=\"\(f(top + plotHeight + 18))\" class=\"tick\" text-anchor=\"middle\">\(HTML.escape(table.rows[i][xIndex].plain))</text>"
        }
        for (s, item) in series.enumerated() {
            let colour = palette[s % palette.count]
            let points = table.rows.indices.compactMap { i in table.number(i, item.value).map { (i, $0) } }
            let band = table.rows.indices.compactMap { i in table.number(i, item.high).map { (i, $0) } }
                + table.rows.indices.reversed().compactMap { i in table.number(i, item.low).map { (i, $0) } }
            if band.count > 2 {
                svg += "<polygon points=\"\(band.map { "\(f(x($0.0))),\(f(y($0.1)))" }.joined(separator: " "))\" fill=\"\(colour)\" opacity=\"0.15\"/>"
            }
            svg += "<polyline points=\"\(points.map { "\(f(x($0.0))),\(f(y($0.1)))" }.joined(separator: " "))\" fill=\"none\" stroke=\"\(colour)\" stroke-width=\"2\"/>"
            for (i, v) in points {
                svg += "<circle cx=\"\(f(x(i)))\" cy=\"\(f(y(v)))\" r=\"3\" fill=\"\(colour)\"><title>\(HTML.escape("\(item.name) \(table.rows[i][xIndex].plain): \(DisplayTable.percent(v))"))</title></circle>"
            }
            svg += "<rect x=\"\(f(left + Double(s) * 110))\" y=\"8\" width=\"12\" height=\"12\" fill=\"\(colour)\"/>"
            svg += "<text x=\"\(f(left + Double(s) * 110 + 16))\" y=\"18\" class=\"label\">\(HTML.escape(item.name)) rate</text>"
        }
        return svg + "</svg>"
    }

    static func stacked(_ table: ResultTable, group: String, part: String, share: String, title: String) -> String? {
        guard let g = table.column(group), let p = table.column(part), !table.rows.isEmpty else { return nil }
        var groups: [String] = []
        for row in table.rows where !groups.contains(row[g].plain) { groups.append(row[g].plain) }
        let shown = Array(groups.prefix(Report.chartRowLimit))
        let labelWidth = 290.0, plotWidth = 400.0, rowHeight = 26.0, top = 34.0
        var svg = header(width: 720, height: top + Double(shown.count) * rowHeight + 10, title: title)
        var legendX = labelWidth
        for state in ["granted", "limited", "denied", "restricted", "notDetermined"] {
            svg += "<rect x=\"\(f(legendX))\" y=\"8\" width=\"12\" height=\"12\" fill=\"\(stateColours[state]!)\"/>"
            svg += "<text x=\"\(f(legendX + 16))\" y=\"18\" class=\"label\">\(state)</text>"
            legendX += 80
        }
        for (i, (name, shortName)) in zip(shown, shorten(shown)).enumerated() {
            let y = top + Double(i) * rowHeight
            svg += "<text x=\"\(f(labelWidth - 8))\" y=\"\(f(y + 16))\" text-anchor=\"end\" class=\"label\">\(HTML.escape(shortName))</text>"
            var offset = labelWidth
            for row in table.rows.indices where table.rows[row][g].plain == name {
                let value = table.number(row, share) ?? 0
                let state = table.rows[row][p].plain
                let width = plotWidth * value
                svg += "<rect x=\"\(f(offset))\" y=\"\(f(y + 4))\" width=\"\(f(width))\" height=\"\(f(rowHeight - 8))\" fill=\"\(stateColours[state] ?? "#bcbd22")\">"
                svg += "<title>\(HTML.escape("\(name) \(state): \(DisplayTable.percent(value))"))</title></rect>"
                offset += width
            }
        }
        return svg + "</svg>"
    }

    static func header(width: Double, height: Double, title: String) -> String {
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 \(f(width)) \(f(height))\" role=\"img\" aria-label=\"\(HTML.escape(title))\">"
    }

    static func interval(_ table: ResultTable, _ row: Int, _ low: String, _ high: String) -> String {
        guard let lo = table.number(row, low), let hi = table.number(row, high) else { return "" }
        return " (95% CI \(DisplayTable.percent(lo)) to \(DisplayTable.percent(hi)))"
    }

    static func f(_ value: Double) -> String { String(format: "%.1f", value) }
}
