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
        let (events, late, first, last, apps) = try db.query("""
            select coalesce(sum(events), 0)::bigint, coalesce(sum(late_events), 0)::bigint, min(day)::text, max(day)::text,
                   count(distinct app)::bigint
              from analytics.events_daily where \(query.filter)
            """, query.parameters).decode((Int, Int, String?, String?, Int).self)[0]
        let (duplicates, rejected) = try db.query("""
            select coalesce(sum(duplicates), 0)::bigint, coalesce(sum(rejected), 0)::bigint
              from analytics.intake_anomalies_daily where \(query.filter)
            """, query.parameters).decode((Int, Int).self)[0]
        let (permission, primed) = try db.query("""
            select coalesce(sum(attempts), 0)::bigint, coalesce(sum(attempts) filter (where arm = 'primed'), 0)::bigint
              from analytics.priming_arms_daily where \(query.filter)
            """, query.parameters).decode((Int, Int).self)[0]
        let picker: Int = try db.query("""
            select coalesce(sum(picker_attempts), 0)::bigint from analytics.picker_adoption_daily where \(query.filter)
            """, query.parameters).scalar()
        let experiment: Int = try db.query("""
            select coalesce(sum(attempts), 0)::bigint from analytics.experiment_arms_detail_daily where \(query.filter)
            """, query.parameters).scalar()
        let (prompted, answered) = try db.query("""
            select coalesce(sum(prompted), 0)::bigint, coalesce(sum(granted + limited + denied + restricted), 0)::bigint
              from analytics.permission_outcomes_daily where \(query.filter)
            """, query.parameters).decode((Int, Int).self)[0]
        var overview = Overview()
        overview.events = events
        overview.lateEvents = late
        overview.firstDay = first
        overview.lastDay = last
        overview.apps = apps
        overview.duplicates = duplicates
        overview.rejected = rejected
        overview.permissionAttempts = permission
        overview.primedAttempts = primed
        overview.pickerAttempts = picker
        overview.experimentAttempts = experiment
        overview.promptedAttempts = prompted
        overview.promptedWithoutOutcome = prompted - answered
        return overview
    }

    /// Current permission states: installs per permission and state, with the share of the
    /// permission's installs. State is current, so the day filters do not apply; the platform
    /// filter applies through the permission's prefix.
    public static func permissionStates(_ db: Connection, _ query: StatsQuery) throws -> ResultTable {
        let rows = try db.query("""
            select permission, state, count(*)::bigint,
                   count(*)::float8 / sum(count(*)) over (partition by permission)
              from analytics.permission_state
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
