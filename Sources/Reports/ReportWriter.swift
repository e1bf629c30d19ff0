import Analytics
import Foundation
import PermissionEvents

/// Renders a report as Markdown, one self-contained HTML file, CSV (one file per table) or
/// JSON (documented in docs/report-format.md), and writes them to a directory.
public struct ReportWriter {
    public enum Format: String, CaseIterable, Sendable { case md, html, csv, json }

    public let report: Report
    public init(_ report: Report) { self.report = report }

    /// A file or directory of the report that could not be written: "/proc/x: cannot create the
    /// report directory: No such file or directory".
    public struct OutputError: Error, CustomStringConvertible {
        public var path: String
        public var action: String
        public var reason: String
        public var description: String { "\(path): \(action): \(reason)" }

        /// The operating system's reason for a Foundation file error (whose own text is a dump
        /// of its error domain).
        public static func reason(_ error: any Error) -> String {
            if let underlying = (error as NSError).userInfo[NSUnderlyingErrorKey] as? any Error,
               case let posix = underlying as NSError, posix.domain == NSPOSIXErrorDomain {  // a POSIXError or an NSError
                return String(cString: strerror(Int32(posix.code)))
            }
            return (error as NSError).localizedDescription
        }
    }

    /// Writes the formats into `directory` (created if needed); returns the paths written.
    /// Throws `OutputError` when a directory or file cannot be written.
    @discardableResult
    public func write(_ formats: [Format], to directory: URL) throws -> [String] {
        let manager = FileManager.default
        func attempt(_ action: String, _ url: URL, _ body: () throws -> Void) throws {
            do { try body() } catch { throw OutputError(path: url.path, action: action, reason: OutputError.reason(error)) }
        }
        func createDirectory(_ url: URL) throws {
            let action = "cannot create the report directory"
            var isDirectory: ObjCBool = false
            if manager.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue {
                throw OutputError(path: url.path, action: action, reason: "it exists and is not a directory")
            }
            try attempt(action, url) { try manager.createDirectory(at: url, withIntermediateDirectories: true) }
        }
        try createDirectory(directory)
        var written: [String] = []
        func save(_ text: String, _ name: String, in folder: URL = directory) throws {
            let url = folder.appendingPathComponent(name)
            try attempt("cannot write the file", url) { try Data(text.utf8).write(to: url, options: .atomic) }
            written.append(url.path)
        }
        for format in formats {
            switch format {
            case .md: try save(markdown, "report.md")
            case .html: try save(html, "report.html")
            case .json: try save(json, "report.json")
            case .csv:
                let folder = directory.appendingPathComponent("csv")
                try? manager.removeItem(at: folder)  // tables of an earlier run must not linger
                try createDirectory(folder)
                for (name, table) in report.tables { try save(table.csv, name + ".csv", in: folder) }
            }
        }
        return written
    }

    var generated: String { ISO8601DateFormatter().string(from: report.generatedAt) }

    // MARK: Markdown

    public var markdown: String {
        var out = "# Photo-library permission report\n\n"
        out += "Selection: \(Self.markdownText(report.filterDescription)). Generated \(generated) by `permaudit report` from the analytics views.\n\n"
        out += "## Summary\n\n" + markdownTable(DisplayTable(report.overview.table)) + "\n"
        if !report.notes.isEmpty {
            out += "### What this data cannot show\n\n" + report.notes.map { "- \(Self.markdownText($0))\n" }.joined() + "\n"
        }
        for section in report.sections {
            out += "## \(section.title)\n\n\(section.intro)\n\n"
            for item in section.items {
                out += "### \(item.table.title)\n\n"
                out += item.table.rows.isEmpty ? "No data for this selection.\n\n" : markdownTable(DisplayTable(item.table)) + "\n"
            }
        }
        return out
    }

    func markdownTable(_ table: DisplayTable) -> String {
        func line(_ cells: [String]) -> String {
            "| " + cells.map(Self.markdownText).joined(separator: " | ") + " |\n"
        }
        return line(table.headers) + line(table.headers.map { _ in "---" }) + table.rows.map(line).joined()
    }

    /// Any text (app versions and experiment names are free text) as Markdown that a CommonMark or
    /// GFM renderer shows as it is, in a table cell too: a backslash before `\`, `|` (which
    /// would end the cell) and the punctuation that starts inline markup (`` ` `` code, `*` `_`
    /// emphasis, `[` `]` links and images, `~` strikethrough, `$` math); `&`, `<`, `>` as
    /// entities (no character reference, no raw HTML); control characters (a line break too) as
    /// `\u{1B}` (`ResultTable.visible`).
    static func markdownText(_ text: String) -> String {
        var out = ""
        for scalar in ResultTable.visible(text).unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\\", "|", "`", "*", "_", "[", "]", "~", "$": out += "\\" + String(scalar)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    // MARK: JSON

    /// The stable JSON form: see docs/report-format.md.
    public var json: String {
        func string(_ s: String?) -> String {
            guard let s else { return "null" }
            var out = ""
            JSONValue.writeQuoted(s, to: &out)
            return out
        }
        func tableJSON(_ name: String, _ table: ResultTable) -> String {
            "{\"name\":\(string(name)),\"title\":\(string(table.title)),\"columns\":[" + table.columns.map(string).joined(separator: ",")
                + "],\"rows\":[" + table.rows.map { "[" + $0.map(\.json).joined(separator: ",") + "]" }.joined(separator: ",") + "]}"
        }
        let filters = report.filters
        var out = "{\"format\":\"permaudit.report\",\"version\":1,\"generatedAt\":\(string(generated)),"
        out += "\"filters\":{\"app\":\(string(filters.app)),\"platform\":\(string(filters.platform)),"
        out += "\"from\":\(string(filters.from)),\"to\":\(string(filters.to))},"
        out += "\"overview\":{" + report.overview.table.rows.map { "\(string($0[0].plain)):\($0[1].json)" }.joined(separator: ",") + "},"
        out += "\"notes\":[" + report.notes.map(string).joined(separator: ",") + "],"
        out += "\"sections\":[" + report.sections.map { section in
            "{\"id\":\(string(section.id)),\"title\":\(string(section.title)),\"intro\":\(string(section.intro)),\"tables\":["
                + section.items.map { tableJSON($0.name, $0.table) }.joined(separator: ",") + "]}"
        }.joined(separator: ",") + "]}\n"
        return out
    }

    // MARK: HTML

    /// One self-contained page: inline CSS and SVG, no script, no external resource.
    public var html: String {
        var body = "<header><h1>Photo-library permission report</h1>"
        body += "<p class=\"meta\">Selection: \(HTML.escape(report.filterDescription)) · generated \(HTML.escape(generated)) "
        body += "by <code>permaudit report</code> from the analytics views</p></header>"
        body += "<nav><ol><li><a href=\"#summary\">Summary</a></li>"
            + report.sections.map { "<li><a href=\"#\($0.id)\">\(HTML.escape($0.title))</a></li>" }.joined() + "</ol></nav>"
        body += "<section id=\"summary\"><h2>Summary</h2>" + headline + htmlTable(report.overview.table)
        if !report.notes.isEmpty {
            body += "<div class=\"notes\"><h3>What this data cannot show</h3><ul>"
                + report.notes.map { "<li>\(HTML.escape($0))</li>" }.joined() + "</ul></div>"
        }
        body += "</section>"
        for section in report.sections {
            body += "<section id=\"\(section.id)\"><h2>\(HTML.escape(section.title))</h2><p>\(HTML.escape(section.intro))</p>"
            for item in section.items {
                body += "<figure id=\"\(item.name)\"><h3>\(HTML.escape(item.table.title))</h3>"
                if item.table.rows.isEmpty {
                    body += "<p class=\"empty\">No data for this selection.</p>"
                } else {
                    if let chart = item.chart, let svg = SVGChart.render(chart, item.table, title: item.table.title) {
                        body += "<div class=\"chart\">\(svg)</div>"
                    }
                    body += htmlTable(item.table)
                }
                body += "</figure>"
            }
            body += "</section>"
        }
        return """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Photo-library permission report</title>
            <style>\(Self.css)</style></head>
            <body>\(body)</body></html>

            """
    }

    /// Headline figures above the summary table.
    var headline: String {
        var cards: [(String, String)] = [("events", "\(report.overview.events)"), ("attempts", "\(report.overview.attempts)")]
        for section in report.sections {
            for item in section.items {
                let t = item.table
                if item.name == "rates_overall", !t.rows.isEmpty {
                    if let v = t.number(0, "denial_rate") { cards.append(("denial rate", DisplayTable.percent(v))) }
                    if let v = t.number(0, "grant_rate") { cards.append(("grant rate", DisplayTable.percent(v))) }
                }
                if item.name == "picker_overall", !t.rows.isEmpty, let v = t.number(0, "picker_adoption") {
                    cards.append(("picker adoption", DisplayTable.percent(v)))
                }
            }
        }
        return "<div class=\"cards\">" + cards.map { "<div class=\"card\"><span>\(HTML.escape($0.0))</span><strong>\(HTML.escape($0.1))</strong></div>" }.joined() + "</div>"
    }

    func htmlTable(_ table: ResultTable) -> String {
        let display = DisplayTable(table)
        var out = table.rows.count > Report.chartRowLimit ? "<div class=\"table scroll\">" : "<div class=\"table\">"
        out += "<table><caption>\(HTML.escape(table.title)) (\(table.rows.count) rows)</caption><thead><tr>"
            + display.headers.map { "<th scope=\"col\">\(HTML.escape($0))</th>" }.joined() + "</tr></thead><tbody>"
        for row in display.rows {
            out += "<tr>" + row.map { "<td>\(HTML.escape($0))</td>" }.joined() + "</tr>"
        }
        return out + "</tbody></table></div>"
    }

    static let css = """
        :root{color-scheme:light;font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1b1f24}
        body{max-width:1100px;margin:0 auto;padding:24px;line-height:1.45;background:#fff}
        h1{font-size:1.7rem;margin:0 0 4px}h2{font-size:1.3rem;border-bottom:2px solid #e3e6ea;padding-bottom:4px;margin-top:36px}
        h3{font-size:1.02rem;margin:18px 0 6px}.meta{color:#57606a;margin:0 0 12px}code{font-size:.9em}
        nav ol{display:flex;flex-wrap:wrap;gap:4px 22px;list-style:none;padding:0;margin:8px 0 0}
        .cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}.card{border:1px solid #d0d7de;border-radius:8px;padding:8px 14px;min-width:120px}
        .card span{display:block;color:#57606a;font-size:.8rem}.card strong{font-size:1.35rem}
        .notes{background:#fff8e1;border-left:4px solid #f0b400;padding:4px 14px;margin:14px 0}
        figure{margin:0 0 22px;break-inside:avoid}.chart svg{width:100%;max-width:760px;height:auto;display:block}
        .table{overflow-x:auto}.scroll{max-height:420px;overflow:auto;border:1px solid #e3e6ea}
        table{border-collapse:collapse;font-size:.84rem;margin:6px 0;font-variant-numeric:tabular-nums}
        caption{text-align:left;color:#57606a;font-size:.8rem;padding:2px 0}
        th,td{border-bottom:1px solid #e3e6ea;padding:3px 8px;text-align:right;white-space:nowrap}
        th:first-child,td:first-child{text-align:left}thead th{background:#f6f8fa;position:sticky;top:0}
        .empty{color:#57606a;font-style:italic}
        svg text{font-family:inherit}svg .label{font-size:12px;fill:#1b1f24}svg .value{font-size:12px;fill:#1b1f24}
        svg .tick{font-size:11px;fill:#57606a}svg .note{font-size:11px;fill:#57606a}
        svg .grid{stroke:#e3e6ea;stroke-width:1}svg .bar{fill:#9ecae1}svg .whisker{stroke:#08306b;stroke-width:1.6;fill:none}
        @media print{body{max-width:none;padding:0;font-size:11pt}nav{display:none}.scroll{max-height:none;overflow:visible;border:0}
        h2{break-after:avoid}thead th{position:static}a{color:inherit;text-decoration:none}
        .table{overflow:visible}table{font-size:8pt}th,td{white-space:normal;padding:2px 4px}}
        """
}
