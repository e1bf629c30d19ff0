import Foundation
import Postgres

/// `permaudit stats`: headline rates from the analytics views, grouped and filtered.
public struct StatsQuery: Sendable {
    public enum Dimension: String, CaseIterable, Sendable {
        case day, week, app, platform, osMajor, appVersion, permission, flow

        var sql: String {
            switch self {
            case .day: return "day"
            case .week: return "date_trunc('week', day)::date"
            case .osMajor: return "os_major"
            case .appVersion: return "app_version"
            default: return rawValue
            }
        }

        /// The grouping as given, with `platform` put before `osMajor` where it is missing: iOS and
        /// Android version numbers overlap (15, 16, ...), so an OS major alone would add unlike
        /// versions together.
        public static func platformBesideOSMajor(_ dimensions: [Dimension]) -> [Dimension] {
            guard let index = dimensions.firstIndex(of: .osMajor), !dimensions.contains(.platform) else { return dimensions }
            var completed = dimensions
            completed.insert(.platform, at: index)
            return completed
        }
    }

    public var by: [Dimension] = []
    public var app: String?
    public var platform: String?
    /// Inclusive bounds on the attempt day, `YYYY-MM-DD`.
    public var from: String?
    public var to: String?

    public init(by: [Dimension] = [], app: String? = nil, platform: String? = nil, from: String? = nil, to: String? = nil) {
        self.by = by
        self.app = app
        self.platform = platform
        self.from = from
        self.to = to
    }

    /// The same filters, other grouping.
    public func grouped(by dimensions: [Dimension]) -> StatsQuery {
        var copy = self
        copy.by = dimensions
        return copy
    }

    var filter: String {
        "($1::text is null or app = $1) and ($2::date is null or day >= $2::date) and ($3::date is null or day <= $3::date)"
            + " and ($4::text is null or platform = $4)"
    }
    var parameters: [(any PostgresEncodable)?] { [app, from, to, platform] }

    /// `coarse` when it has every dimension of the grouping (it is smaller and faster to sum),
    /// else `fine`, which has them all.
    func view(_ coarse: String, has dimensions: Set<Dimension>, else fine: String) -> String {
        Set(by).isSubset(of: dimensions) ? coarse : fine
    }

    var selectList: String { by.map { "\($0.sql)::text as \($0.rawValue)" }.joined(separator: ", ") }
    var groupList: String { by.map(\.sql).joined(separator: ", ") }
}

public enum Stats {
    /// Denial, grant and limited rates of prompted attempts, with Wilson 95% intervals.
    public static func denial(_ db: Connection, _ query: StatsQuery) throws -> ResultTable {
        let select = query.by.isEmpty ? "" : query.selectList + ", "
        let group = query.by.isEmpty ? "" : "group by \(query.groupList) order by \(query.groupList)"
        let rows = try db.query("""
            select \(select)sum(prompted)::bigint, sum(denied)::bigint, sum(granted)::bigint, sum(limited)::bigint,
                   sum(restricted)::bigint, sum(denied_permanent)::bigint
              from analytics.permission_outcomes_daily where \(query.filter) \(group)
            """, query.parameters)
        var table = ResultTable(title: "Denial rate of prompted attempts (95% Wilson intervals)",
                                columns: query.by.map(\.rawValue) + ["prompted", "denied", "denial_rate", "denial_low", "denial_high",
                                                                      "grant_rate", "grant_low", "grant_high", "limited_rate", "restricted", "denied_permanent",
                                                                      "granted", "limited"])
        let k = query.by.count
        for row in 0..<rows.count {
            let prompted = try rows.value(row, k, as: Int?.self) ?? 0
            guard prompted > 0 else { continue }
            let denied = try rows.value(row, k + 1, as: Int.self)
            let granted = try rows.value(row, k + 2, as: Int.self)
            let limited = try rows.value(row, k + 3, as: Int.self)
            let denial = Proportion(denied, of: prompted), grant = Proportion(granted, of: prompted)
            let dw = Statistics.wilson(denial), gw = Statistics.wilson(grant)
            table.rows.append((0..<k).map { rows[row, $0].map(ResultTable.Cell.text) ?? .null } + [
                .integer(prompted), .integer(denied), number(denial.rate), number(dw?.low), number(dw?.high),
                number(grant.rate), number(gw?.low), number(gw?.high), number(Proportion(limited, of: prompted).rate),
                .integer(try rows.value(row, k + 4, as: Int.self)), .integer(try rows.value(row, k + 5, as: Int.self)),
                .integer(granted), .integer(limited),
            ])
        }
        return table
    }

    /// Primed vs unprimed (and every experiment's variants vs control): access rate with its
    /// interval, lift, difference interval and p-value against the baseline.
    public static func priming(_ db: Connection, _ query: StatsQuery) throws -> [ResultTable] {
        let select = query.by.isEmpty ? "" : query.selectList + ", "
        let group = query.by.isEmpty ? "" : query.groupList + ", "
        let arms = try db.query("""
            select \(select)arm, sum(attempts)::bigint, sum(accepted)::bigint, sum(declined)::bigint, sum(prompted)::bigint,
                   sum(granted)::bigint, sum(limited)::bigint, sum(denied_at_dialog)::bigint
              from \(query.view("analytics.priming_arms_daily", has: [.day, .week, .app, .platform, .permission],
                               else: "analytics.priming_arms_by_dimension_daily")) where \(query.filter)
             group by \(group)arm order by \(group)arm desc
            """, query.parameters)
        let primed = try armTable(arms, dimensions: query.by.map(\.rawValue), armColumn: "arm", baseline: "unprimed",
                                  title: "Pre-permission screens: primed vs unprimed (access = granted or limited, intention-to-treat)")

        let variants = try db.query("""
            select \(select)experiment, variant, sum(attempts)::bigint, 0::bigint, 0::bigint, sum(prompted)::bigint,
                   sum(granted)::bigint, sum(limited)::bigint, sum(denied_at_dialog)::bigint
              from \(query.view("analytics.experiment_arms_detail_daily", has: [.day, .week, .app, .platform],
                               else: "analytics.experiment_arms_by_dimension_daily")) where \(query.filter)
             group by \(group)experiment, variant order by \(group)experiment, variant <> 'control', variant
            """, query.parameters)
        let experiments = try armTable(variants, dimensions: query.by.map(\.rawValue) + ["experiment"], armColumn: "variant",
                                       baseline: "control", title: "Experiments: each variant vs control (permission attempts carrying the key)")
        return [primed, experiments]
    }

    /// A note when the log holds events the projector has not reached yet
    /// (`analytics.projector_lag`, over the whole log whatever the filters): every count of the
    /// analytics views leaves them out, while the intake counts (duplicates, rejected) are already
    /// current. Nil when caught up, and for a role that may not ask (the view's count is the
    /// analyst's; asked first, so that a caller's transaction is not ended by a refusal).
    public static func unprojectedNote(_ db: Connection) throws -> String? {
        let mayAsk = try db.mayRead(["analytics.projector_lag"], calling: ["projection.unprojected_events"])
        guard mayAsk, let (behind, age) = try db.query("select events_behind, lag_seconds from analytics.projector_lag")
            .decode((Int64, Double).self).first, behind > 0 else { return nil }
        return "\(behind) \(behind == 1 ? "event" : "events") in the log (all apps and days) \(behind == 1 ? "is" : "are") not projected yet (the oldest stored \(Int(age.rounded())) s ago): "
            + "the numbers here leave them out. Run 'permaudit project --once', or keep 'permaudit project --follow' running."
    }

    /// Notes on the experiments `priming` shows, one per experiment and problem: a key pooled over
    /// several apps (the grouping has no `app` and no app is chosen; a key's variants are
    /// assigned within each app, so pooled arms can hide or reverse an app's effect, Simpson's
    /// paradox; `--by app` separates them), and a key without a `control` variant in some or all
    /// of its groups (their variants are shown without a comparison). Client text is made
    /// visible (`ResultTable.visible`).
    public static func experimentNotes(_ db: Connection, _ query: StatsQuery) throws -> [String] {
        let pools = query.app == nil && !query.by.contains(.app)
        let select = query.by.isEmpty ? "" : query.selectList + ", "
        let group = query.by.map { $0.rawValue + ", " }.joined()
        return try db.query("""
            with arms as (
                select \(select)experiment, app as arm_app, variant
                  from \(query.view("analytics.experiment_arms_detail_daily", has: [.day, .week, .app, .platform],
                                    else: "analytics.experiment_arms_by_dimension_daily")) where \(query.filter)
            ), groups as (
                select \(group)experiment, bool_or(variant = 'control') as has_control from arms group by \(group)experiment
            ), apps as (
                select experiment, count(distinct arm_app)::bigint as apps from arms group by experiment
            )
            select g.experiment, a.apps, count(*) filter (where not g.has_control)::bigint, count(*)::bigint
              from groups g join apps a using (experiment)
             group by g.experiment, a.apps order by g.experiment
            """, query.parameters).decode((String, Int, Int, Int).self).flatMap { experiment, apps, withoutControl, groups in
            let name = ResultTable.visible(experiment)
            let control = withoutControl == 0 ? []
                : withoutControl == groups ? ["experiment \(name) has no variant named 'control'; its variants are shown without a comparison"]
                : ["experiment \(name) has no variant named 'control' in \(withoutControl) of its \(groups) groups; their variants are shown without a comparison"]
            return (pools && apps > 1 ? ["experiment \(name) runs in \(apps) apps; its arms are pooled across them (--by app compares them per app)"] : [])
                + control
        }
    }

    /// Rows are (dimensions..., arm, attempts, accepted, declined, prompted, granted, limited, denied at the dialog),
    /// ordered so that the rows of one group are adjacent.
    static func armTable(_ rows: QueryResult, dimensions: [String], armColumn: String, baseline: String, title: String) throws -> ResultTable {
        var table = ResultTable(title: title, columns: dimensions + [armColumn, "attempts", "access_rate", "access_low", "access_high",
                                                                      "lift", "difference", "difference_low", "difference_high", "p_value",
                                                                      "too_small", "prompted", "denial_rate_at_dialog", "denial_at_dialog_low",
                                                                      "denial_at_dialog_high", "acceptance_rate", "acceptance_low", "acceptance_high",
                                                                      "z"])
        let k = dimensions.count
        struct Arm { var group: [String?]; var name: String; var attempts, accepted, prompted, access, denied: Int }
        var arms: [Arm] = []
        for row in 0..<rows.count {
            let attempts = try rows.value(row, k + 1, as: Int.self)
            arms.append(Arm(group: (0..<k).map { rows[row, $0] }, name: rows[row, k] ?? "",
                            attempts: attempts, accepted: try rows.value(row, k + 2, as: Int.self),
                            prompted: try rows.value(row, k + 4, as: Int.self),
                            access: try rows.value(row, k + 5, as: Int.self) + rows.value(row, k + 6, as: Int.self),
                            denied: try rows.value(row, k + 7, as: Int.self)))
        }
        let baselines = Dictionary(arms.filter { $0.name == baseline }.map { ($0.group, $0) }, uniquingKeysWith: { first, _ in first })
        for arm in arms {
            let access = Proportion(arm.access, of: arm.attempts)
            let wilson = Statistics.wilson(access)
            let base = baselines[arm.group]
            let comparison = base.flatMap { $0.name == arm.name ? nil : Statistics.compare(access, baseline: Proportion($0.access, of: $0.attempts)) }
            let denial = Proportion(arm.denied, of: arm.prompted)
            let denialInterval = Statistics.wilson(denial)
            let acceptance = arm.name == "primed" ? Proportion(arm.accepted, of: arm.attempts) : Proportion(0, of: 0)
            let acceptanceInterval = Statistics.wilson(acceptance)
            table.rows.append(arm.group.map { $0.map(ResultTable.Cell.text) ?? .null } + [
                .text(arm.name), .integer(arm.attempts), number(access.rate), number(wilson?.low), number(wilson?.high),
                number(comparison?.relativeLift), number(comparison?.difference), number(comparison?.differenceInterval.low),
                number(comparison?.differenceInterval.high), number(comparison?.pValue),
                .text(access.isTooSmall ? "yes" : "no"), .integer(arm.prompted),
                number(denial.rate), number(denialInterval?.low), number(denialInterval?.high),
                number(acceptance.rate), number(acceptanceInterval?.low), number(acceptanceInterval?.high),
                number(comparison?.z),
            ])
        }
        return table
    }

    /// Picker adoption, completion and full-vs-limited share.
    public static func picker(_ db: Connection, _ query: StatsQuery) throws -> ResultTable {
        let select = query.by.isEmpty ? "" : query.selectList + ", "
        let group = query.by.isEmpty ? "" : "group by \(query.groupList) order by \(query.groupList)"
        let rows = try db.query("""
            select \(select)sum(picker_attempts)::bigint, sum(picker_completed)::bigint, sum(permission_attempts)::bigint,
                   sum(full_access)::bigint, sum(limited_access)::bigint
              from \(query.view("analytics.picker_adoption_detail_daily", has: [.day, .week, .app, .platform, .osMajor, .appVersion, .flow],
                               else: "analytics.picker_adoption_by_dimension_daily")) where \(query.filter) \(group)
            """, query.parameters)
        var table = ResultTable(title: "Picker vs full access",
                                columns: query.by.map(\.rawValue) + ["picker_attempts", "permission_attempts", "picker_adoption",
                                                                      "adoption_low", "adoption_high", "picker_completion", "full_access",
                                                                      "limited_access", "full_access_share"])
        let k = query.by.count
        for row in 0..<rows.count {
            let picker = try rows.value(row, k, as: Int?.self) ?? 0
            let permission = try rows.value(row, k + 2, as: Int?.self) ?? 0
            guard picker + permission > 0 else { continue }
            let completed = try rows.value(row, k + 1, as: Int.self)
            let full = try rows.value(row, k + 3, as: Int.self), limited = try rows.value(row, k + 4, as: Int.self)
            let adoption = Proportion(picker, of: picker + permission)
            let wilson = Statistics.wilson(adoption)
            table.rows.append((0..<k).map { rows[row, $0].map(ResultTable.Cell.text) ?? .null } + [
                .integer(picker), .integer(permission), number(adoption.rate), number(wilson?.low), number(wilson?.high),
                number(Proportion(completed, of: picker).rate), .integer(full), .integer(limited),
                number(Proportion(full, of: full + limited).rate),
            ])
        }
        return table
    }

    static func number(_ value: Double?) -> ResultTable.Cell { value.map(ResultTable.Cell.number) ?? .null }
}
