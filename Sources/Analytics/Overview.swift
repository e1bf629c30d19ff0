import Foundation
import Postgres

/// The size and data quality of a selection, from the analytics views.
public struct Overview: Sendable, Equatable {
    public var events = 0
    public var lateEvents = 0
    public var duplicates = 0
    public var rejected = 0
    public var permissionAttempts = 0
    public var pickerAttempts = 0
    public var promptedAttempts = 0
    /// Prompted attempts whose events show no answer (granted, limited, denied, restricted).
    public var promptedWithoutOutcome = 0
    public var primedAttempts = 0
    /// Permission attempts in experiment arms, summed over experiment keys: an attempt carrying
    /// two keys counts in each (as in `analytics.experiment_arms`), so this can exceed `attempts`.
    public var experimentAttempts = 0
    public var apps = 0
    /// First and last day with events (UTC, `YYYY-MM-DD`), nil when there are none.
    public var firstDay: String?
    public var lastDay: String?

    public init() {}

    public var attempts: Int { permissionAttempts + pickerAttempts }

    /// The overview as a two-column table.
    public var table: ResultTable {
        var table = ResultTable(title: "Summary", columns: ["metric", "value"])
        let items: [(String, ResultTable.Cell)] = [
            ("first_day", firstDay.map(ResultTable.Cell.text) ?? .null), ("last_day", lastDay.map(ResultTable.Cell.text) ?? .null),
            ("apps", .integer(apps)), ("events", .integer(events)), ("attempts", .integer(attempts)),
            ("permission_attempts", .integer(permissionAttempts)), ("picker_attempts", .integer(pickerAttempts)),
            ("prompted_attempts", .integer(promptedAttempts)), ("prompted_without_outcome", .integer(promptedWithoutOutcome)),
            ("primed_attempts", .integer(primedAttempts)), ("experiment_attempts", .integer(experimentAttempts)),
            ("late_events", .integer(lateEvents)), ("duplicates", .integer(duplicates)), ("rejected", .integer(rejected)),
        ]
        table.rows = items.map { [.text($0.0), $0.1] }
        return table
    }
}

extension Stats {
    /// Events, attempts and data quality for the query's filters (its grouping is ignored).
    public static func overview(_ db: Connection, _ query: StatsQuery) throws -> Overview {
        // One statement: each view summed under the same filters.
        let row = try db.query("""
            select e.events, e.late_events, e.first_day, e.last_day, e.apps, i.duplicates, i.rejected,
                   p.attempts, p.primed, k.picker_attempts, x.attempts, o.prompted, o.answered
              from (select coalesce(sum(events), 0)::bigint as events, coalesce(sum(late_events), 0)::bigint as late_events,
                           min(day)::text as first_day, max(day)::text as last_day, count(distinct app)::bigint as apps
                      from analytics.events_daily where \(query.filter)) e,
                   (select coalesce(sum(duplicates), 0)::bigint as duplicates, coalesce(sum(rejected), 0)::bigint as rejected
                      from analytics.intake_anomalies_daily where \(query.filter)) i,
                   (select coalesce(sum(attempts), 0)::bigint as attempts,
                           coalesce(sum(attempts) filter (where arm = 'primed'), 0)::bigint as primed
                      from analytics.priming_arms_daily where \(query.filter)) p,
                   (select coalesce(sum(picker_attempts), 0)::bigint as picker_attempts
                      from analytics.picker_adoption_daily where \(query.filter)) k,
                   (select coalesce(sum(attempts), 0)::bigint as attempts
                      from analytics.experiment_arms_detail_daily where \(query.filter)) x,
                   (select coalesce(sum(prompted), 0)::bigint as prompted,
                           coalesce(sum(granted + limited + denied + restricted), 0)::bigint as answered
                      from analytics.permission_outcomes_daily where \(query.filter)) o
            """, query.parameters).decode((Int, Int, String?, String?, Int, Int, Int, Int, Int, Int, Int, Int, Int).self)[0]
        var overview = Overview()
        (overview.events, overview.lateEvents, overview.firstDay, overview.lastDay, overview.apps) = (row.0, row.1, row.2, row.3, row.4)
        (overview.duplicates, overview.rejected) = (row.5, row.6)
        (overview.permissionAttempts, overview.primedAttempts, overview.pickerAttempts, overview.experimentAttempts) = (row.7, row.8, row.9, row.10)
        overview.promptedAttempts = row.11
        overview.promptedWithoutOutcome = row.11 - row.12
        return overview
    }

    /// Current permission states: installs per permission and state, with the share of the
    /// permission's installs. State is current, so the day filters do not apply; the platform
    /// filter applies through the permission's prefix.
    public static func permissionStates(_ db: Connection, _ query: StatsQuery) throws -> ResultTable {
        let rows = try db.query("""
            select permission, state, sum(installs)::bigint,
                   sum(installs)::float8 / sum(sum(installs)) over (partition by permission)
              from analytics.permission_state_counts
             where ($1::text is null or app = $1) and ($2::text is null or permission like $2 || '.%')
             group by permission, state
             order by permission, array_position(array['granted', 'limited', 'denied', 'restricted', 'notDetermined'], state)
            """, [query.app, query.platform])
        var table = ResultTable(title: "Current permission state (installs)", columns: ["permission", "state", "installs", "share"])
        for (permission, state, installs, share) in try rows.decode((String, String, Int, Double).self) {
            table.rows.append([.text(permission), .text(state), .integer(installs), .number(share)])
        }
        return table
    }
}
