import Foundation
import Postgres

/// An independent recomputation of every analytics view from the whole log, written the plain
/// way (DISTINCT ON over all events), to compare the incremental projections against.
enum ProjectionOracle {
    static let attempts = """
        with ev as (
            select e.*, e.payload->'experiments' as experiments, e.payload->'attributes' as attrs
              from audit.events e where e.attempt is not null
        ), first_event as (
            select distinct on (app, attempt) app, attempt, occurred_at, platform, os_major, app_version, stream_key
              from ev order by app, attempt, occurred_at, position
        ), first_permission as (
            select distinct on (app, attempt) app, attempt, permission from ev where permission is not null
             order by app, attempt, occurred_at, position
        ), first_flow as (
            select distinct on (app, attempt) app, attempt, flow from ev where flow is not null
             order by app, attempt, occurred_at, position
        ), first_experiments as (
            select distinct on (app, attempt) app, attempt, experiments from ev where experiments is not null
             order by app, attempt, occurred_at, position
        ), last_outcome as (
            select distinct on (app, attempt) app, attempt, substr(type, 12) as outcome,
                   type = 'permission.denied' and coalesce((attrs->>'permanent')::boolean, false) as permanent
              from ev where type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')
             order by app, attempt, occurred_at desc, position desc
        ), kinds as (
            select app, attempt,
                   bool_or(type = 'permission.prompted' and coalesce((attrs->>'dialogShown')::boolean, true)) as prompted,
                   bool_or(type = 'permission.prompted' or type = 'prePermission.shown') as permission_attempt,
                   bool_or(type = 'prePermission.shown') as primed,
                   bool_or(type = 'prePermission.accepted') as accepted,
                   bool_or(type = 'prePermission.declined') as declined,
                   bool_or(type = 'picker.opened') as picker_opened,
                   bool_or(type = 'picker.completed') as picker_completed
              from ev group by app, attempt
        )
        select f.app, f.attempt, (f.occurred_at at time zone 'UTC')::date as day, f.platform, f.os_major, f.app_version,
               p.permission, fl.flow, x.experiments, o.outcome, coalesce(o.permanent, false) as permanent,
               k.prompted, k.permission_attempt, k.primed, k.accepted, k.declined, k.picker_opened, k.picker_completed
          from first_event f
          join kinds k using (app, attempt)
          left join first_permission p using (app, attempt)
          left join first_flow fl using (app, attempt)
          left join first_experiments x using (app, attempt)
          left join last_outcome o using (app, attempt)
        """

    /// (view, query giving exactly the view's columns)
    static let views: [(String, String)] = [
        ("analytics.permission_outcomes_daily", """
            select day, app, platform, os_major, app_version, permission, flow, count(*) as prompted,
                   count(*) filter (where outcome = 'granted') as granted, count(*) filter (where outcome = 'limited') as limited,
                   count(*) filter (where outcome = 'denied') as denied, count(*) filter (where outcome = 'denied' and permanent) as denied_permanent,
                   count(*) filter (where outcome = 'restricted') as restricted
              from attempts where prompted group by 1, 2, 3, 4, 5, 6, 7
            """),
        ("analytics.priming_arms", """
            select app, platform, permission, case when primed then 'primed' else 'unprimed' end as arm, count(*) as attempts,
                   count(*) filter (where primed and accepted) as accepted, count(*) filter (where primed and declined) as declined,
                   count(*) filter (where prompted) as prompted, count(*) filter (where outcome = 'granted') as granted,
                   count(*) filter (where outcome = 'limited') as limited, count(*) filter (where prompted and outcome = 'denied') as denied,
                   count(*) filter (where prompted and outcome = 'denied') as denied_at_dialog,
                   count(*) filter (where outcome = 'denied' and not prompted) as denied_without_dialog
              from attempts where permission_attempt group by 1, 2, 3, 4
            """),
        ("analytics.experiment_arms", """
            select app, x.key as experiment, x.value as variant, count(*) as attempts, count(*) filter (where prompted) as prompted,
                   count(*) filter (where outcome = 'granted') as granted, count(*) filter (where outcome = 'limited') as limited,
                   count(*) filter (where prompted and outcome = 'denied') as denied,
                   count(*) filter (where prompted and outcome = 'denied') as denied_at_dialog,
                   count(*) filter (where outcome = 'denied' and not prompted) as denied_without_dialog
              from attempts, jsonb_each_text(experiments) as x where permission_attempt group by 1, 2, 3
            """),
        ("analytics.picker_adoption_daily", """
            select day, app, platform, flow,
                   count(*) filter (where picker_opened and not permission_attempt) as picker_attempts,
                   count(*) filter (where picker_opened and not permission_attempt and picker_completed) as picker_completed,
                   count(*) filter (where permission_attempt) as permission_attempts,
                   count(*) filter (where permission_attempt and outcome = 'granted') as full_access,
                   count(*) filter (where permission_attempt and outcome = 'limited') as limited_access
              from attempts where permission_attempt or picker_opened group by 1, 2, 3, 4
            """),
        ("analytics.experiment_arms_detail_daily", """
            select day, app, platform, x.key as experiment, x.value as variant, count(*) as attempts,
                   count(*) filter (where prompted) as prompted,
                   count(*) filter (where outcome = 'granted') as granted, count(*) filter (where outcome = 'limited') as limited,
                   count(*) filter (where prompted and outcome = 'denied') as denied,
                   count(*) filter (where prompted and outcome = 'denied') as denied_at_dialog,
                   count(*) filter (where outcome = 'denied' and not prompted) as denied_without_dialog
              from attempts, jsonb_each_text(experiments) as x where permission_attempt group by 1, 2, 3, 4, 5
            """),
        ("analytics.picker_adoption_detail_daily", """
            select day, app, platform, os_major, app_version, flow,
                   count(*) filter (where picker_opened and not permission_attempt) as picker_attempts,
                   count(*) filter (where picker_opened and not permission_attempt and picker_completed) as picker_completed,
                   count(*) filter (where permission_attempt) as permission_attempts,
                   count(*) filter (where permission_attempt and outcome = 'granted') as full_access,
                   count(*) filter (where permission_attempt and outcome = 'limited') as limited_access
              from attempts where permission_attempt or picker_opened group by 1, 2, 3, 4, 5, 6
            """),
        ("analytics.priming_arms_by_dimension_daily", """
            select day, app, platform, os_major, app_version, permission, flow, case when primed then 'primed' else 'unprimed' end as arm,
                   count(*) as attempts, count(*) filter (where primed and accepted) as accepted,
                   count(*) filter (where primed and declined) as declined, count(*) filter (where prompted) as prompted,
                   count(*) filter (where outcome = 'granted') as granted, count(*) filter (where outcome = 'limited') as limited,
                   count(*) filter (where prompted and outcome = 'denied') as denied,
                   count(*) filter (where prompted and outcome = 'denied') as denied_at_dialog,
                   count(*) filter (where outcome = 'denied' and not prompted) as denied_without_dialog
              from attempts where permission_attempt group by 1, 2, 3, 4, 5, 6, 7, 8
            """),
        ("analytics.experiment_arms_by_dimension_daily", """
            select day, app, platform, os_major, app_version, permission, flow, x.key as experiment, x.value as variant,
                   count(*) as attempts, count(*) filter (where prompted) as prompted,
                   count(*) filter (where outcome = 'granted') as granted, count(*) filter (where outcome = 'limited') as limited,
                   count(*) filter (where prompted and outcome = 'denied') as denied,
                   count(*) filter (where prompted and outcome = 'denied') as denied_at_dialog,
                   count(*) filter (where outcome = 'denied' and not prompted) as denied_without_dialog
              from attempts, jsonb_each_text(experiments) as x where permission_attempt group by 1, 2, 3, 4, 5, 6, 7, 8, 9
            """),
        ("analytics.picker_adoption_by_dimension_daily", """
            select day, app, platform, os_major, app_version, permission, flow,
                   count(*) filter (where picker_opened and not permission_attempt) as picker_attempts,
                   count(*) filter (where picker_opened and not permission_attempt and picker_completed) as picker_completed,
                   count(*) filter (where permission_attempt) as permission_attempts,
                   count(*) filter (where permission_attempt and outcome = 'granted') as full_access,
                   count(*) filter (where permission_attempt and outcome = 'limited') as limited_access
              from attempts where permission_attempt or picker_opened group by 1, 2, 3, 4, 5, 6, 7
            """),
    ]

    /// Events per day and the late ones (an event of the same install that occurred later is
    /// earlier in the log's reading order, transaction id then position), counted over the whole
    /// log at once.
    static let eventsDaily = """
        select (occurred_at at time zone 'UTC')::date as day, app, platform, count(*) as events,
               count(*) filter (where occurred_at < max_before) as late_events
          from (select e.*, max(occurred_at) over (partition by stream_key order by transaction_id, position
                                                   rows between unbounded preceding and 1 preceding) as max_before
                  from audit.events e) as x
         group by 1, 2, 3
        """

    static let permissionState = """
        select distinct on (e.app, e.stream_key, e.permission) e.app, s.subject, e.permission,
               case when e.type = 'permission.statusObserved' then e.payload->'attributes'->>'status'
                    when e.type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted') then substr(e.type, 12)
                    else 'notDetermined' end as state,
               case when e.type in ('permission.statusObserved', 'permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')
                    then e.occurred_at end as since
          from audit.events e join audit.subject_streams s on s.stream_key = e.stream_key
         where e.permission is not null
         order by e.app, e.stream_key, e.permission,
               e.type in ('permission.statusObserved', 'permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted') desc,
               e.occurred_at desc, e.position desc
        """

    /// Rows that differ between each view and its recomputation (empty when all agree).
    static func differences(_ db: Connection) throws -> [String] {
        var problems: [String] = []
        var checks = views.map { ($0.0, "with attempts as (\(attempts)) \($0.1)") }
        checks.append(("analytics.permission_state", permissionState))
        checks.append(("analytics.events_daily", eventsDaily))
        for (view, expected) in checks {
            let rows = try db.query("""
                with expected as (\(expected))
                select 'missing from view: ' || x::text from (select * from expected except all select * from \(view)) x
                union all
                select 'unexpected in view: ' || y::text from (select * from \(view) except all select * from expected) y
                limit 5
                """)
            for row in 0..<rows.count { problems.append("\(view): \(rows[row, 0] ?? "")") }
        }
        return problems
    }
}
