import Analytics
import EventLog
import Foundation
import PermissionEvents
import Postgres
import Projections
import Reports
import Simulation
import TestSupport
import XCTest

final class ReportTests: XCTestCase {
    /// One simulated, projected database shared by the tests of this class.
    nonisolated(unsafe) static var simulated: String?
    static func simulatedDatabase() throws -> String {
        if let url = simulated { return url }
        let url = try TestDatabase.create()
        try TestDatabase.loadSimulation(.october(seed: 5, subjects: 3000), into: url)
        simulated = url
        return url
    }
    override class func tearDown() { simulated.map(TestDatabase.drop) }

    var directory: URL!
    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("report-test-\(UUID().uuidString)")
    }
    override func tearDown() { try? FileManager.default.removeItem(at: directory) }

    // MARK: Numbers

    func testEveryNumberEqualsTheViewsForTheSameFilters() throws {
        let db = try Connection(url: try Self.simulatedDatabase())
        let filters = StatsQuery(app: "com.example.snap", platform: "ios", from: "2026-10-05", to: "2026-10-20")
        let report = try Report.build(db, filters: filters)
        let scope = "app = 'com.example.snap' and platform = 'ios' and day between '2026-10-05' and '2026-10-20'"

        let (events, late) = try db.query("select sum(events)::bigint, sum(late_events)::bigint from analytics.events_daily where \(scope)")
            .decode((Int, Int).self)[0]
        XCTAssertEqual(report.overview.events, events)
        XCTAssertEqual(report.overview.lateEvents, late)
        XCTAssertEqual(report.overview.firstDay, "2026-10-05")
        XCTAssertEqual(report.overview.lastDay, "2026-10-20")
        XCTAssertEqual(report.overview.permissionAttempts,
                       try db.query("select sum(attempts)::bigint from analytics.priming_arms_daily where \(scope)").scalar(Int.self))
        XCTAssertEqual(report.overview.pickerAttempts,
                       try db.query("select sum(picker_attempts)::bigint from analytics.picker_adoption_daily where \(scope)").scalar(Int.self))

        try assertTable(report, "rates_by_flow", keys: ["flow"], db: db, sql: """
            select flow, sum(prompted), sum(denied), sum(denied)::float8 / sum(prompted), sum(granted)::float8 / sum(prompted),
                   sum(limited)::float8 / sum(prompted)
              from analytics.permission_outcomes_daily where \(scope) group by flow
            """, values: ["prompted", "denied", "denial_rate", "grant_rate", "limited_rate"])
        try assertTable(report, "rates_by_app_version", keys: ["app", "appVersion"], db: db, sql: """
            select app, app_version, sum(prompted), sum(denied), sum(denied_permanent), sum(granted), sum(limited)
              from analytics.permission_outcomes_daily where \(scope) group by 1, 2
            """, values: ["prompted", "denied", "denied_permanent", "granted", "limited"])
        try assertTable(report, "weekly_trend", keys: ["week"], db: db, sql: """
            select date_trunc('week', day)::date::text, sum(prompted), sum(granted)::float8 / sum(prompted)
              from analytics.permission_outcomes_daily where \(scope) group by 1
            """, values: ["prompted", "grant_rate"])
        try assertTable(report, "priming_by_platform", keys: ["platform", "arm"], db: db, sql: """
            select platform, arm, sum(attempts), sum(granted + limited)::float8 / sum(attempts), sum(prompted),
                   sum(denied_at_dialog)::float8 / sum(prompted)
              from analytics.priming_arms_daily where \(scope) group by 1, 2
            """, values: ["attempts", "access_rate", "prompted", "denial_rate_at_dialog"])
        try assertTable(report, "priming_by_app", keys: ["app", "arm"], db: db, sql: """
            select app, arm, sum(attempts), sum(granted + limited)::float8 / sum(attempts)
              from analytics.priming_arms_daily where \(scope) group by 1, 2
            """, values: ["attempts", "access_rate"])
        try assertTable(report, "experiments", keys: ["app", "experiment", "variant"], db: db, sql: """
            select app, experiment, variant, sum(attempts), sum(granted + limited)::float8 / sum(attempts)
              from analytics.experiment_arms_detail_daily where \(scope) group by 1, 2, 3
            """, values: ["attempts", "access_rate"])
        try assertTable(report, "picker_by_app_version", keys: ["app", "appVersion"], db: db, sql: """
            select app, app_version, sum(picker_attempts), sum(permission_attempts),
                   sum(picker_attempts)::float8 / sum(picker_attempts + permission_attempts)
              from analytics.picker_adoption_detail_daily where \(scope) group by 1, 2
            """, values: ["picker_attempts", "permission_attempts", "picker_adoption"])
        try assertTable(report, "permission_state", keys: ["permission", "state"], db: db, sql: """
            select permission, state, count(*) from analytics.permission_state
             where app = 'com.example.snap' and permission like 'ios.%' group by 1, 2
            """, values: ["installs"])
    }

    /// The table's rows, keyed by `keys`, equal the query's rows (keys first, then `values`).
    func assertTable(_ report: Report, _ name: String, keys: [String], db: Connection, sql: String, values: [String],
                     file: StaticString = #filePath, line: UInt = #line) throws {
        let table = try XCTUnwrap(report.item(name), name, file: file, line: line)
        let expected = try db.query(sql)
        XCTAssertEqual(table.rows.count, expected.count, "\(name): rows", file: file, line: line)
        XCTAssertGreaterThan(expected.count, 0, "\(name): the check needs data", file: file, line: line)
        for row in 0..<expected.count {
            let key = (0..<keys.count).map { expected[row, $0] ?? "" }
            guard let match = table.rows.indices.first(where: { r in keys.map { table.text(r, $0) } == key }) else {
                XCTFail("\(name): no row \(key)", file: file, line: line)
                continue
            }
            for (offset, column) in values.enumerated() {
                let want = try expected.value(row, keys.count + offset, as: Double.self)
                let got = try XCTUnwrap(table.number(match, column), "\(name) \(key) \(column)", file: file, line: line)
                XCTAssertEqual(got, want, accuracy: 1e-12, "\(name) \(key) \(column)", file: file, line: line)
            }
        }
    }

    // MARK: Formats

    func testFormatsCarryTheSameTables() throws {
        let report = try Report.build(try Connection(url: try Self.simulatedDatabase()), filters: StatsQuery())
        let written = try ReportWriter(report).write(ReportWriter.Format.allCases, to: directory)
        XCTAssertEqual(written.count, 3 + report.tables.count)

        let json = try JSONParser.parse(try String(contentsOf: directory.appendingPathComponent("report.json"), encoding: .utf8),
                                        maxDepth: 64)
        XCTAssertEqual(json["format"]?.stringValue, "permaudit.report")
        XCTAssertEqual(json["version"], .number("1"))
        guard case let .array(sections)? = json["sections"] else { return XCTFail("sections") }
        XCTAssertEqual(sections.count, report.sections.count)
        guard case let .array(tables)? = sections[0]["tables"], case let .array(rows)? = tables[1]["rows"],
              case let .array(columns)? = tables[1]["columns"] else { return XCTFail("tables") }
        let first = report.sections[0].items[1].table
        XCTAssertEqual(tables[1]["name"]?.stringValue, report.sections[0].items[1].name)
        XCTAssertEqual(columns.compactMap(\.stringValue), first.columns)
        XCTAssertEqual(rows.count, first.rows.count)
        guard case let .object(overview)? = json["overview"] else { return XCTFail("overview") }
        XCTAssertEqual(overview.first { $0.key == "events" }?.value, .number(String(report.overview.events)))

        for (name, table) in report.tables {
            let csv = try String(contentsOf: directory.appendingPathComponent("csv/\(name).csv"), encoding: .utf8)
            XCTAssertEqual(csv.split(separator: "\n").count, table.rows.count + 1, name)
            XCTAssertEqual(csv.split(separator: "\n").first.map(String.init), table.columns.joined(separator: ","), name)
        }
        let markdown = try String(contentsOf: directory.appendingPathComponent("report.md"), encoding: .utf8)
        for section in report.sections { XCTAssertTrue(markdown.contains("## \(section.title)"), section.title) }
        let html = try String(contentsOf: directory.appendingPathComponent("report.html"), encoding: .utf8)
        XCTAssertFalse(html.contains("<script"))
        XCTAssertFalse(html.contains("http://") && html.replacingOccurrences(of: "http://www.w3.org/2000/svg", with: "").contains("http://"))
        XCTAssertFalse(html.contains("https://"))
        XCTAssertGreaterThanOrEqual(html.components(separatedBy: "<svg").count - 1, 10)
        for text in [markdown, html] { assertNoBrokenNumbers(text) }
    }

    func assertNoBrokenNumbers(_ text: String, file: StaticString = #filePath, line: UInt = #line) {
        for bad in ["NaN", "nan%", "inf%", "Infinity"] {
            XCTAssertFalse(text.contains(bad), "output contains \(bad)", file: file, line: line)
        }
    }

    // MARK: Little or no data

    func testEmptyDatabaseGivesAReportThatSaysSo() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let report = try Report.build(try Connection(url: url), filters: StatsQuery())
        XCTAssertEqual(report.sections.map(\.id), ["compliance"])
        XCTAssertEqual(report.item("findings")?.rows.count, 0)
        XCTAssertTrue(report.notes[0].hasPrefix("No events match this selection"), report.notes[0])
        XCTAssertEqual(report.sections.first?.intro, "No over-permission finding, and no projected events to judge.")
        try ReportWriter(report).write(ReportWriter.Format.allCases, to: directory)
        let html = try String(contentsOf: directory.appendingPathComponent("report.html"), encoding: .utf8)
        XCTAssertTrue(html.contains("No events match this selection"))
        assertNoBrokenNumbers(html)
        assertNoBrokenNumbers(try String(contentsOf: directory.appendingPathComponent("report.json"), encoding: .utf8))
    }

    /// Events stored but not projected yet are named first: the views leave them out, while the
    /// intake counts already hold them.
    func testEventsNotProjectedYetAreNamed() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        let attempt = UUID()
        try EventLog(connection: db).append([
            EventFixtures.event(type: "permission.prompted", attempt: attempt, removing: ["attributes"]),
            EventFixtures.event(type: "permission.denied", occurredAt: "2026-10-03T09:15:29.000Z", attempt: attempt),
        ])
        let behind = try Report.build(db, filters: StatsQuery())
        XCTAssertTrue(behind.notes[0].hasPrefix("2 events in the log (all apps and days) are not projected yet"), behind.notes[0])
        XCTAssertEqual(behind.overview.events, 0)
        // A role that may not read the projector's lag (the auditor) gets no such note, one that
        // may not read the findings (the analyst) a note saying so; neither's transaction is
        // ended by a refusal.
        try db.transaction {
            try db.execute("set local role permaudit_auditor")
            let auditor = try Report.build(db, filters: StatsQuery())
            XCTAssertFalse(auditor.notes.contains { $0.contains("not projected yet") }, auditor.notes.joined(separator: "\n"))
            XCTAssertEqual(try db.query("select 1").scalar(Int.self), 1)
        }
        try db.transaction {
            try db.execute("set local role permaudit_analyst")
            let analyst = try Report.build(db, filters: StatsQuery())
            XCTAssertTrue(analyst.notes.contains { $0.hasPrefix("The compliance findings need read access") }, analyst.notes.joined(separator: "\n"))
            XCTAssertEqual(try db.query("select 1").scalar(Int.self), 1)
        }
        try Projector(connection: db).catchUp()
        let caughtUp = try Report.build(db, filters: StatsQuery())
        XCTAssertFalse(caughtUp.notes.contains { $0.contains("not projected yet") }, caughtUp.notes.joined(separator: "\n"))
        XCTAssertEqual(caughtUp.overview.events, 2)
    }

    /// The findings are over all days: a day range without events still has the attempts of
    /// other days to judge (here picker attempts, which leave no permission state); another
    /// platform has none.
    func testFindingsWithNothingFoundSayWhetherThereWasAnythingToJudge() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        let attempt = UUID()
        try EventLog(connection: db).append([
            EventFixtures.event(type: "picker.opened", attempt: attempt, overrides: ["attributes": #"{"picker":"androidPhotoPicker"}"#],
                                removing: ["permission"]),
            EventFixtures.event(type: "picker.completed", attempt: attempt, overrides: ["attributes": #"{"selectedCount":1}"#],
                                removing: ["permission"]),
        ])
        try Projector(connection: db).catchUp()
        func intro(_ report: Report) -> String? { report.sections.first { $0.id == "compliance" }?.intro }
        let laterDays = try Report.build(db, filters: StatsQuery(from: "2026-11-01"))
        XCTAssertEqual(laterDays.overview.events, 0)
        XCTAssertEqual(intro(laterDays), "No over-permission finding: the app asks for what its flows need.")
        XCTAssertEqual(intro(try Report.build(db, filters: StatsQuery(platform: "ios"))), "No over-permission finding, and no projected events to judge.")
    }

    /// Days without events leave out the sections over attempts, not the current state and the
    /// compliance findings, which the day filters do not limit.
    func testADayRangeWithoutEventsKeepsTheCurrentStateAndTheFindings() throws {
        let db = try Connection(url: try Self.simulatedDatabase())
        let all = try Report.build(db, filters: StatsQuery(platform: "ios"))
        let later = try Report.build(db, filters: StatsQuery(platform: "ios", from: "2030-01-01"))
        XCTAssertEqual(later.overview.events, 0)
        XCTAssertTrue(later.notes[0].hasPrefix("No events match this selection"), later.notes[0])
        XCTAssertEqual(later.sections.map(\.id), ["state", "compliance"])
        for name in ["permission_state", "findings"] {
            let rows = try XCTUnwrap(all.item(name)?.rows, name)
            XCTAssertFalse(rows.isEmpty, "\(name): the check needs data")
            XCTAssertEqual(later.item(name)?.rows, rows, name)
        }
        XCTAssertTrue(ReportWriter(later).json.contains("\"sections\":[{\"id\":\"state\""))
    }

    /// The overview as docs/report-format.md defines it: `attempts` = permission + picker
    /// attempts (an attempt of a settings.opened alone is in neither), `first_day`/`last_day`
    /// are event days, and --to bounds attempts by attempt day and events by event day.
    func testOverviewAttemptsAndDaysAreAsDocumented() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        let (late, settings) = (UUID(), UUID())
        try EventLog(connection: db).append([
            EventFixtures.event(type: "permission.prompted", occurredAt: "2026-10-31T23:59:00.000Z", attempt: late, removing: ["attributes"]),
            EventFixtures.event(type: "permission.granted", occurredAt: "2026-11-01T00:01:00.000Z", attempt: late, removing: ["attributes"]),
            EventFixtures.event(type: "settings.opened", occurredAt: "2026-10-30T12:00:00.000Z", attempt: settings, removing: ["attributes"]),
        ])
        try Projector(connection: db).catchUp()
        let all = try Report.build(db, filters: StatsQuery()).overview
        XCTAssertEqual([all.events, all.attempts, all.permissionAttempts, all.pickerAttempts], [3, 1, 1, 0])
        XCTAssertEqual([all.firstDay, all.lastDay], ["2026-10-30", "2026-11-01"])
        let october = try Report.build(db, filters: StatsQuery(to: "2026-10-31")).overview
        XCTAssertEqual([october.events, october.attempts], [2, 1])
        XCTAssertEqual(october.lastDay, "2026-10-31")
    }

    func testTinyDataNamesWhatIsMissing() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        let attempt = UUID()
        try EventLog(connection: db).append([
            EventFixtures.event(type: "permission.prompted", attempt: attempt, removing: ["experiments", "attributes"]),
            EventFixtures.event(type: "permission.denied", occurredAt: "2026-10-03T09:15:29.000Z", attempt: attempt, removing: ["experiments"]),
        ])
        try Projector(connection: db).catchUp()
        let report = try Report.build(db, filters: StatsQuery())
        let notes = report.notes.joined(separator: "\n")
        for expected in ["No pre-permission screen", "No permission attempt carried an experiment key", "The system picker was not used",
                         "too small to judge"] {
            XCTAssertTrue(notes.contains(expected), "missing note: \(expected)\n\(notes)")
        }
        XCTAssertEqual(report.item("rates_overall")?.number(0, "denial_rate"), 1)
        try ReportWriter(report).write(ReportWriter.Format.allCases, to: directory)
        for file in ["report.html", "report.md", "report.json"] {
            assertNoBrokenNumbers(try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8))
        }
    }

    /// 50 flows and 30 app versions: charts draw the largest rows only (no crowded labels),
    /// tables keep every row.
    func testLongTailsStayReadable() throws {
        let url = try TestDatabase.create()
        defer { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        var events: [String] = []
        for i in 0..<60 {
            let attempt = UUID()
            // App versions that differ in the middle only: their chart labels must still differ.
            let overrides = ["flow": EventFixtures.quoted("flow-\(i % 50)"),
                             "appVersion": EventFixtures.quoted("1.\(i % 30).0-a-rather-long-build-label-of-the-nightly-channel")]
            events.append(EventFixtures.event(type: "permission.prompted", subject: "s\(i)", attempt: attempt, overrides: overrides,
                                              removing: ["attributes"]))
            events.append(EventFixtures.event(type: i % 3 == 0 ? "permission.denied" : "permission.granted", subject: "s\(i)",
                                              occurredAt: "2026-10-03T09:16:00.000Z", attempt: attempt, overrides: overrides,
                                              removing: i % 3 == 0 ? [] : ["attributes"]))
        }
        try EventLog(connection: db).append(events)
        try Projector(connection: db).catchUp()
        let report = try Report.build(db, filters: StatsQuery())
        XCTAssertEqual(report.item("rates_by_flow")?.rows.count, 50)
        XCTAssertEqual(report.item("rates_by_app_version")?.rows.count, 30)
        let html = ReportWriter(report).html
        for (figure, rows) in [("rates_by_flow", 50), ("rates_by_app_version", 30)] {
            let start = try XCTUnwrap(html.range(of: "<figure id=\"\(figure)\">"))
            let end = try XCTUnwrap(html.range(of: "</figure>", range: start.upperBound..<html.endIndex))
            let part = html[start.upperBound..<end.lowerBound]
            XCTAssertEqual(part.components(separatedBy: "class=\"bar\"").count - 1, Report.chartRowLimit, figure)
            XCTAssertTrue(part.contains("\(Report.chartRowLimit) largest of \(rows) rows"), figure)
            XCTAssertEqual(part.components(separatedBy: "<tr>").count - 2, rows, figure)  // header row + data rows
            let labels = part.components(separatedBy: "class=\"label\">").dropFirst().map { $0.prefix { $0 != "<" } }
            XCTAssertEqual(labels.count, Report.chartRowLimit, figure)
            XCTAssertEqual(Set(labels).count, labels.count, "\(figure): \(labels)")
            XCTAssertTrue(labels.allSatisfy { $0.count <= 40 }, "\(labels)")
        }
    }

    /// Free text in the data (an app version, an experiment variant) stays inside its Markdown
    /// cell and is not HTML.
    /// The report of a new database holding one granted attempt whose events carry `overrides`
    /// (raw JSON text by field).
    func reportOfOneGrantedAttempt(_ overrides: [String: String]) throws -> Report {
        let url = try TestDatabase.create()
        addTeardownBlock { TestDatabase.drop(url) }
        let db = try Connection(url: url)
        let attempt = UUID()
        try EventLog(connection: db).append([
            EventFixtures.event(type: "permission.prompted", attempt: attempt, overrides: overrides, removing: ["attributes"]),
            EventFixtures.event(type: "permission.granted", occurredAt: "2026-10-03T09:15:29.000Z", attempt: attempt, overrides: overrides,
                                removing: ["attributes"]),
        ])
        try Projector(connection: db).catchUp()
        return try Report.build(db, filters: StatsQuery())
    }

    /// Free text in the data (an app version, an experiment key and variant) and the --app value
    /// stay inside their Markdown cell or line and read back as they are: no HTML, entity, image,
    /// link, code or emphasis, in a CommonMark/GFM renderer.
    func testFreeTextReadsBackAsItIsInMarkdown() throws {
        let version = #"5.0\|&lt;b&gt;<b>x</b>![t](http://e.x/t.png)"#, key = "[x](javascript:alert(1))"
        let variant = #"`c` **b** _e_ ~~s~~ $m$ <i>a|b</i> \"#
        var report = try reportOfOneGrantedAttempt(["appVersion": EventFixtures.quoted(version),
                                                    "experiments": "{" + EventFixtures.quoted(key) + ":" + EventFixtures.quoted(variant) + "}"])
        // An experiment without a control variant is named in the notes (free text there too).
        let note = "No variant is named 'control' (the baseline) in \(key) (com.example.app): those variants are shown without a comparison."
        XCTAssertTrue(report.notes.contains(note), "\(report.notes)")
        report.filters.app = #"<script>x</script>"&_a_"#
        let markdown = ReportWriter(report).markdown
        var cells: [String] = []
        for row in markdown.split(separator: "\n") where row.hasPrefix("|") {
            XCTAssertTrue(row.hasPrefix("| ") && row.hasSuffix(" |"), String(row))
            for cell in Self.markdownCells(row.dropFirst(2).dropLast(2)) {
                guard let text = Self.literal(cell) else { XCTFail("markup in cell \(cell)"); continue }
                cells.append(text)
            }
        }
        for text in [version, key, variant] { XCTAssertTrue(cells.contains(text), "no cell reads \(text)\n\(markdown)") }
        let lines = markdown.split(separator: "\n")
        let selection = try XCTUnwrap(lines.first { $0.hasPrefix("Selection: ") }).dropFirst(11)
        XCTAssertEqual(Self.literal(try XCTUnwrap(selection.components(separatedBy: ". Generated ").first)[...]),
                       "app " + report.filters.app!)
        XCTAssertTrue(lines.contains { $0.hasPrefix("- ") && Self.literal($0.dropFirst(2)) == note }, markdown)
    }

    /// A GFM table row's cells: split at every `|` not escaped by a backslash.
    static func markdownCells(_ row: Substring) -> [Substring] {
        var cells: [Substring] = [], start = row.startIndex, index = row.startIndex
        while index < row.endIndex {
            if row[index] == "\\" { index = row.index(after: index) } else if row[index] == "|" {
                cells.append(row[start..<index])
                start = row.index(after: index)
            }
            if index < row.endIndex { index = row.index(after: index) }
        }
        return (cells + [row[start...]]).map { $0.trimmingCharacters(in: .whitespaces)[...] }
    }

    /// Markdown inline text as a CommonMark renderer shows it (a backslash before ASCII
    /// punctuation, `&amp;`, `&lt;`, `&gt;`), nil where a character would start markup: an
    /// unescaped `` ` `` `*` `_` `[` `]` `~` `$` `|` `<` `>` `\` or `&`.
    static func literal(_ markdown: Substring) -> String? {
        var out = "", rest = markdown
        while let c = rest.popFirst() {
            if c == "\\", let next = rest.first, next.isASCII, next.isPunctuation || next.isSymbol {
                out.append(next)
                rest = rest.dropFirst()
            } else if c == "&" {
                guard let (entity, character) = [("amp;", "&"), ("lt;", "<"), ("gt;", ">")].first(where: { rest.hasPrefix($0.0) }) else { return nil }
                out += character
                rest = rest.dropFirst(entity.count)
            } else if "`*_[]~$|<>\\".contains(c) {
                return nil
            } else {
                out.append(c)
            }
        }
        return out
    }

    /// Terminal controls sent by a client (ESC sequences, a C1 CSI, bidirectional overrides)
    /// show as `\u{1B}` in the Markdown and HTML reports, as `stats` shows them; JSON and CSV keep
    /// the data as it is.
    func testControlCharactersFromClientsShowAsEscapes() throws {
        let key = "\u{1B}[31mRED\u{1B}]0;pwned\u{7}", variant = "\u{202E}evil\u{2066}", version = "5.0\u{9B}2J\n2"
        let report = try reportOfOneGrantedAttempt(["appVersion": EventFixtures.quoted(version),
                                                    "experiments": "{" + EventFixtures.quoted(key) + ":" + EventFixtures.quoted(variant) + "}"])
        try ReportWriter(report).write(ReportWriter.Format.allCases, to: directory)
        func read(_ file: String) throws -> String { try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8) }
        let markdown = try read("report.md"), html = try read("report.html")
        for (name, text) in [("report.md", markdown), ("report.html", html)] {
            let hostile = text.unicodeScalars.filter { ($0.properties.generalCategory == .control && $0 != "\n") || $0.properties.isBidiControl }
            XCTAssertEqual(hostile.map { String($0.value, radix: 16) }, [], name)
            let unescaped = text.replacingOccurrences(of: "\\", with: "")  // Markdown's backslashes before [ ] and \
            for shown in ["u{1B}[31mRED", "u{1B}]0;pwned", "u{7}", "u{202E}evil", "u{2066}", "5.0", "u{9B}2J", "u{A}2"] {
                XCTAssertTrue(unescaped.contains(shown), "\(name) lacks \(shown)")
            }
        }
        XCTAssertTrue(try read("report.json").contains(#""\u001b[31mRED\u001b]0;pwned\u0007""#))
        XCTAssertTrue(try read("csv/experiments.csv").contains(key + "," + variant + ","))
    }

    // MARK: Rendering

    func testHTMLRendersInHeadlessChromium() throws {
        guard let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first(where: FileManager.default.isExecutableFile) else {
            return XCTFail("chromium is not installed: 'make test' installs it (Debian packages chromium, fonts-dejavu-core)")
        }
        let report = try Report.build(try Connection(url: try Self.simulatedDatabase()), filters: StatsQuery())
        try ReportWriter(report).write([.html], to: directory)
        let blank = directory.appendingPathComponent("blank.html")
        try Data("<!DOCTYPE html><html><body></body></html>".utf8).write(to: blank)

        func screenshot(_ page: URL) throws -> (bytes: Int, log: String) {
            let png = page.deletingPathExtension().appendingPathExtension("png")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: chromium)
            process.arguments = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
                                 "--user-data-dir=\(directory.appendingPathComponent("profile").path)",
                                 "--screenshot=\(png.path)", "--window-size=1200,2400", page.absoluteString]
            let errors = Pipe()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0, log)
            let size = (try FileManager.default.attributesOfItem(atPath: png.path)[.size] as? Int) ?? 0
            return (size, log)
        }
        let page = try screenshot(directory.appendingPathComponent("report.html"))
        let empty = try screenshot(blank)
        // A rendered page compresses far worse than a white one.
        XCTAssertGreaterThan(page.bytes, 10 * max(empty.bytes, 1), "the page looks blank")
        let consoleLines = page.log.split(separator: "\n").filter { $0.contains("CONSOLE") || $0.contains("Uncaught") || $0.contains("net::ERR") }
        XCTAssertEqual(consoleLines, [], "console errors")
    }
}
