import Analytics
import Compliance
import Foundation
import Postgres

/// A batch report for one set of filters, in sections of tables, each table optionally drawn as a
/// chart: every number read from the analytics views through `Stats`, and a compliance section
/// from `Findings` (which also reads the projections and the log, with an auditor's rights).
///
///     let report = try Report.build(db, filters: StatsQuery(app: "com.example.snap"))
///     try ReportWriter(report).write([.html, .json], to: directory)
public struct Report: Sendable {
    public var generatedAt: Date
    public var filters: StatsQuery
    public var overview: Overview
    /// What the data cannot show (no prompts, no experiment, small arms...), in plain words.
    public var notes: [String]
    public var sections: [Section]

    public struct Section: Sendable {
        public var id: String
        public var title: String
        public var intro: String
        public var items: [Item]
    }

    /// One table; `name` is stable (CSV file name, JSON key).
    public struct Item: Sendable {
        public var name: String
        public var table: ResultTable
        public var chart: Chart?
    }

    /// How a table is drawn. Columns are named; charts read the table's own cells.
    public enum Chart: Sendable {
        /// One horizontal bar per row: `value` with its [low, high] interval; the label joins
        /// the `label` columns; rows beyond `limit` (by `weight`) are left to the table.
        case intervalBars(label: [String], value: String, low: String, high: String, weight: String)
        /// A line per series over the `x` column, each with its interval band.
        case trend(x: String, series: [(name: String, value: String, low: String, high: String)])
        /// One stacked bar per `group` value: shares of `part` values.
        case stacked(group: String, part: String, share: String)
    }

    /// Rows a chart draws at most; the table holds the rest.
    public static let chartRowLimit = 15

    public static func build(_ db: Connection, filters: StatsQuery, now: Date = Date()) throws -> Report {
        let q = filters.grouped(by: [])
        let overview = try Stats.overview(db, q)
        var notes = try Stats.unprojectedNote(db).map { [$0] } ?? []
        var sections: [Section] = []
        if overview.events == 0 {
            // The current state and the compliance findings below do not depend on the days.
            notes.append("No events match this selection, so there are no attempts to measure. Check the filters, ingest events "
                         + "('permaudit ingest') and project them ('permaudit project --once').")
        } else {
            sections = try attemptSections(db, q, overview, notes: &notes)
        }
        let states = try Stats.permissionStates(db, q)
        if states.rows.isEmpty {
            notes.append("No install has a recorded permission state in this selection.")
        } else {
            sections.append(Section(
                id: "state", title: "Current permission state",
                intro: "The latest answer or observed status of each install and permission (as of the last projection; "
                    + "the day filters do not apply to a current state).",
                items: [Item(name: "permission_state", table: states, chart: .stacked(group: "permission", part: "state", share: "share"))]))
        }
        if try Findings.mayRead(db) {
            let findings = try Findings.all(db, app: filters.app).filter { filters.platform == nil || $0.platform == filters.platform }
            var table = ResultTable(title: "Over-permission findings",
                                    columns: ["severity", "rule", "app", "platform", "subject", "count", "evidence", "guidance"])
            table.rows = findings.map { [.text($0.severity.rawValue), .text($0.rule), .text($0.app), .text($0.platform), .text($0.subject),
                                         .integer($0.count), .text($0.evidence), .text($0.guidance)] }
            sections.append(Section(
                id: "compliance", title: "Compliance: over-permission findings",
                intro: findings.isEmpty
                    ? (try Findings.haveEvidence(db, app: filters.app, platform: filters.platform)
                        ? "No over-permission finding: the app asks for what its flows need."
                        : "No over-permission finding, and no projected events to judge.")
                    : "Where the apps ask for more access than their flows need, with the evidence and the platform guidance "
                    + "(as `permaudit audit permissions` reports; over all days).",
                items: [Item(name: "findings", table: table, chart: nil)]))
        } else {
            notes.append("The compliance findings need read access to the projections and the log (the auditor role); this role has none.")
        }
        if overview.promptedWithoutOutcome > 0 {
            notes.append("\(overview.promptedWithoutOutcome) prompted attempts have no answer yet (the answer event is missing or still on its way).")
        }
        return Report(generatedAt: now, filters: filters, overview: overview, notes: notes, sections: sections)
    }

    /// The sections over the attempts of the selection (rates, trend, priming, picker), with
    /// notes on what the attempts cannot show.
    static func attemptSections(_ db: Connection, _ q: StatsQuery, _ overview: Overview, notes: inout [String]) throws -> [Section] {
        var sections: [Section] = []
        func denial(_ by: [StatsQuery.Dimension], _ name: String, _ title: String, label: [String]) throws -> Item {
            var table = try Stats.denial(db, q.grouped(by: by))
            table.title = title
            return Item(name: name, table: table,
                        chart: .intervalBars(label: label, value: "denial_rate", low: "denial_low", high: "denial_high", weight: "prompted"))
        }
        if overview.promptedAttempts == 0 {
            notes.append("No system dialog was shown in this selection: denial, limited and grant rates need prompted attempts.")
        } else {
            var overall = try Stats.denial(db, q)
            overall.title = "All prompted attempts"
            sections.append(Section(
                id: "rates", title: "Denial, limited and grant rates at the system dialog",
                intro: "Prompted attempts (the system dialog was shown) and how they ended. Rates are shares of prompted attempts "
                    + "with 95% Wilson intervals; charts show the denial rate. Rows beyond \(chartRowLimit) are in the tables only.",
                items: [
                    Item(name: "rates_overall", table: overall, chart: nil),
                    try denial([.platform], "rates_by_platform", "By platform", label: ["platform"]),
                    try denial([.platform, .osMajor], "rates_by_os_major", "By platform and OS major", label: ["platform", "osMajor"]),
                    try denial([.app, .appVersion], "rates_by_app_version", "By app and app version", label: ["app", "appVersion"]),
                    try denial([.permission], "rates_by_permission", "By permission", label: ["permission"]),
                    try denial([.flow], "rates_by_flow", "By flow", label: ["flow"]),
                ]))
            var weekly = try Stats.denial(db, q.grouped(by: [.week]))
            weekly.title = "Weekly trend (attempt week, Monday first)"
            sections.append(Section(
                id: "trend", title: "Weekly trend",
                intro: "Rates of prompted attempts per ISO week of the attempt day, with 95% intervals (shaded). "
                    + "The latest weeks are provisional: late events still arrive.",
                items: [Item(name: "weekly_trend", table: weekly,
                             chart: .trend(x: "week", series: [("denial", "denial_rate", "denial_low", "denial_high"),
                                                               ("grant", "grant_rate", "grant_low", "grant_high")]))]))
        }

        if overview.permissionAttempts > 0 {
            var items: [Item] = []
            let armChart = Chart.intervalBars(label: ["arm"], value: "access_rate", low: "access_low", high: "access_high", weight: "attempts")
            if overview.primedAttempts == 0 {
                notes.append("No pre-permission screen was shown in this selection: primed vs unprimed cannot be compared.")
            } else if overview.primedAttempts == overview.permissionAttempts {
                notes.append("Every permission attempt in this selection was primed: there is no unprimed baseline.")
            }
            var overall = try Stats.priming(db, q)[0]
            overall.title = "Primed vs unprimed"
            items.append(Item(name: "priming_overall", table: overall, chart: armChart))
            var byPlatform = try Stats.priming(db, q.grouped(by: [.platform]))[0]
            byPlatform.title = "Primed vs unprimed by platform (with the denial rate at the dialog)"
            items.append(Item(name: "priming_by_platform", table: byPlatform,
                              chart: .intervalBars(label: ["platform", "arm"], value: "denial_rate_at_dialog",
                                                   low: "denial_at_dialog_low", high: "denial_at_dialog_high", weight: "prompted")))
            var byApp = try Stats.priming(db, q.grouped(by: [.app]))[0]
            byApp.title = "Primed vs unprimed per app (each app against its own unprimed attempts)"
            items.append(Item(name: "priming_by_app", table: byApp,
                              chart: .intervalBars(label: ["app", "arm"], value: "access_rate", low: "access_low", high: "access_high", weight: "attempts")))
            if overview.experimentAttempts == 0 {
                notes.append("No permission attempt carried an experiment key: there are no experiment arms to compare.")
            } else {
                var experiments = try Stats.priming(db, q.grouped(by: [.app]))[1]
                experiments.title = "Experiments: each variant vs control, per app"
                items.append(Item(name: "experiments", table: experiments,
                                  chart: .intervalBars(label: ["app", "experiment", "variant"], value: "access_rate",
                                                       low: "access_low", high: "access_high", weight: "attempts")))
                let (app, experiment, variant) = (experiments.column("app")!, experiments.column("experiment")!, experiments.column("variant")!)
                let groups = Dictionary(grouping: experiments.rows) { [$0[app].plain, $0[experiment].plain] }
                let withoutControl = groups.filter { !$0.value.contains { $0[variant].plain == "control" } }.keys
                    .map { "\($0[1]) (\($0[0]))" }.sorted()
                if !withoutControl.isEmpty {
                    notes.append("No variant is named 'control' (the baseline) in \(withoutControl.joined(separator: ", ")): "
                                 + "those variants are shown without a comparison.")
                }
            }
            if items.contains(where: { item in
                guard let column = item.table.column("too_small") else { return false }
                return item.table.rows.contains { $0[column] == .text("yes") }
            }) {
                notes.append("Some arms are too small to judge (fewer than 30 attempts, or fewer than 5 successes or failures): "
                             + "they are flagged 'too small'.")
            }
            sections.append(Section(
                id: "priming", title: "Effect of pre-permission screens",
                intro: "Permission attempts with (primed) and without (unprimed) the app's own explanation screen first. "
                    + "Access = granted or limited, over all attempts of the arm (intention-to-treat: declining the screen "
                    + "is no access). Each arm is compared with its baseline (unprimed, or the control variant): relative lift, "
                    + "difference in percentage points (pp) with its unpooled 95% interval, and the pooled two-proportion z statistic with its two-sided p-value. "
                    + "Acceptance = accepted / primed attempts. Primed vs unprimed is observational; experiments are randomised. "
                    + "The overall and per-platform comparisons pool the apps: an app that always primes is in the primed arm only, "
                    + "so read the comparison per app.",
                items: items))
        } else {
            notes.append("No permission was requested in this selection: there is nothing on pre-permission screens.")
        }

        if overview.pickerAttempts == 0 {
            notes.append("The system picker was not used in this selection: picker adoption is zero or undefined.")
        }
        if overview.attempts > 0 {
            func picker(_ by: [StatsQuery.Dimension], _ name: String, _ title: String, label: [String]) throws -> Item {
                var table = try Stats.picker(db, q.grouped(by: by))
                table.title = title
                return Item(name: name, table: table,
                            chart: by.isEmpty ? nil : .intervalBars(label: label, value: "picker_adoption", low: "adoption_low",
                                                                    high: "adoption_high", weight: "picker_attempts"))
            }
            sections.append(Section(
                id: "picker", title: "System picker vs full access",
                intro: "Picker adoption = picker attempts / (picker attempts + permission attempts), with 95% Wilson intervals; "
                    + "completion = picker attempts with items picked / picker attempts; full-access share = granted / "
                    + "(granted + limited) permission attempts.",
                items: [
                    try picker([], "picker_overall", "All attempts", label: []),
                    try picker([.flow], "picker_by_flow", "By flow", label: ["flow"]),
                    try picker([.platform], "picker_by_platform", "By platform", label: ["platform"]),
                    try picker([.app, .appVersion], "picker_by_app_version", "By app and app version", label: ["app", "appVersion"]),
                ]))
        }
        return sections
    }

    /// Every table of the report with its stable name, the overview first.
    public var tables: [(name: String, table: ResultTable)] {
        [("summary", overview.table)] + sections.flatMap { $0.items.map { ($0.name, $0.table) } }
    }

    /// The filters in words, e.g. "app com.example.snap, from 2026-10-01".
    public var filterDescription: String {
        var parts: [String] = []
        if let app = filters.app { parts.append("app \(app)") }
        if let platform = filters.platform { parts.append("platform \(platform)") }
        if let from = filters.from { parts.append("from \(from)") }
        if let to = filters.to { parts.append("to \(to)") }
        return parts.isEmpty ? "all data" : parts.joined(separator: ", ")
    }
}
