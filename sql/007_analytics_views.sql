-- 007: the analytics views (domain contract section 5): the SQL API for analysts, reports and
-- dashboards. They hold counts; rates are computed from them, so any grouping can be summed.
-- The role permaudit_analyst reads these views and nothing else.

create schema analytics;
comment on schema analytics is 'PermissionAudit: stable analytics views (counts per grouping)';

create view analytics.permission_outcomes_daily as
select day, app, platform, os_major, app_version, permission, flow,
       prompted, granted, limited, denied, denied_permanent, restricted
  from projection.outcomes_daily
 where prompted <> 0;
comment on view analytics.permission_outcomes_daily is
    'Prompted attempts (a dialog was shown) and their outcomes, per attempt day and dimensions.';

-- The per-day form of the arms, for time filters; priming_arms sums it over days.
create view analytics.priming_arms_daily as
select day, app, platform, permission, arm, attempts, accepted, declined, prompted, granted, limited, denied,
       denied_at_dialog
  from projection.priming_daily
 where attempts <> 0;
comment on view analytics.priming_arms_daily is
    'Permission attempts per day, app, platform, permission and arm (primed = a pre-permission screen was shown).';

create view analytics.priming_arms as
select app, platform, permission, arm,
       sum(attempts)::bigint as attempts, sum(accepted)::bigint as accepted, sum(declined)::bigint as declined,
       sum(prompted)::bigint as prompted, sum(granted)::bigint as granted, sum(limited)::bigint as limited,
       sum(denied)::bigint as denied, sum(denied_at_dialog)::bigint as denied_at_dialog
  from projection.priming_daily
 group by app, platform, permission, arm
having sum(attempts) <> 0;
comment on view analytics.priming_arms is
    'Permission attempts per app, platform, permission and arm (primed / unprimed), over all days. granted, limited, denied: outcomes of all the arm''s attempts; denied_at_dialog: denials of prompted attempts (denial rate at the dialog = denied_at_dialog / prompted).';

create view analytics.experiment_arms_daily as
select day, app, experiment, variant, attempts, prompted, granted, limited, denied, denied_at_dialog
  from projection.experiments_daily
 where attempts <> 0;
comment on view analytics.experiment_arms_daily is
    'Permission attempts carrying an experiment key, per day, app, experiment and variant.';

create view analytics.experiment_arms as
select app, experiment, variant,
       sum(attempts)::bigint as attempts, sum(prompted)::bigint as prompted, sum(granted)::bigint as granted,
       sum(limited)::bigint as limited, sum(denied)::bigint as denied, sum(denied_at_dialog)::bigint as denied_at_dialog
  from projection.experiments_daily
 group by app, experiment, variant
having sum(attempts) <> 0;
comment on view analytics.experiment_arms is
    'Permission attempts carrying an experiment key, per app, experiment and variant (control is the baseline).';

create view analytics.picker_adoption_daily as
select day, app, platform, flow, picker_attempts, picker_completed, permission_attempts, full_access, limited_access
  from projection.picker_daily
 where picker_attempts <> 0 or permission_attempts <> 0;
comment on view analytics.picker_adoption_daily is
    'Picker attempts (no permission involved) and permission attempts with their access level, per day.';

create view analytics.permission_state as
select app, stream_key as subject, permission, state, since
  from projection.permission_state;
comment on view analytics.permission_state is
    'Current state per app, install (subject as stored: the stream key, never the raw install id) and permission.';

-- The analyst role: the views above, nothing else. A deployment grants it LOGIN and a password.
do $$
begin
    if not exists (select 1 from pg_roles where rolname = 'permaudit_analyst') then
        create role permaudit_analyst nologin;
    end if;
end;
$$;
revoke all on schema audit, projection from public;
grant usage on schema analytics to permaudit_analyst;
grant select on all tables in schema analytics to permaudit_analyst;
alter default privileges in schema analytics grant select on tables to permaudit_analyst;
