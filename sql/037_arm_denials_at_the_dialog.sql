-- 037: in the arm views, denied counts the denials at the dialog.
--
-- The contract (section 4) gives for each arm "denial rate at the dialog = denied / prompted",
-- and section 5 says that any analyst computes the rates from the views' counts. denied counted
-- every attempt of the arm that ended denied, including requests the OS denied without a dialog
-- (Android "don't ask again"), so that formula could pass 100%; the right numerator was only in
-- denied_at_dialog (added by 007 for the product's own reports and dashboards). denied now counts
-- the prompted attempts (a dialog was shown) that ended denied, as in permission_outcomes_daily,
-- and equals denied_at_dialog, which stays for the queries that use it. The denials without a
-- dialog move to a new last column, denied_without_dialog. granted and limited keep counting all
-- the arm's attempts: access rate = (granted + limited) / attempts is intention-to-treat.
-- The projection's tables are unchanged (their denied still counts every denied attempt).

create or replace view analytics.priming_arms_daily as
select day, app, platform, permission, arm, attempts, accepted, declined, prompted, granted, limited,
       denied_at_dialog as denied, denied_at_dialog, denied - denied_at_dialog as denied_without_dialog
  from projection.priming_daily
 where attempts <> 0;

create or replace view analytics.priming_arms as
select app, platform, permission, arm,
       sum(attempts)::bigint as attempts, sum(accepted)::bigint as accepted, sum(declined)::bigint as declined,
       sum(prompted)::bigint as prompted, sum(granted)::bigint as granted, sum(limited)::bigint as limited,
       sum(denied_at_dialog)::bigint as denied, sum(denied_at_dialog)::bigint as denied_at_dialog,
       sum(denied - denied_at_dialog)::bigint as denied_without_dialog
  from projection.priming_daily
 group by app, platform, permission, arm
having sum(attempts) <> 0;
comment on view analytics.priming_arms is
    'Permission attempts per app, platform, permission and arm (primed / unprimed), over all days. granted, limited: outcomes of all the arm''s attempts (access rate = (granted + limited) / attempts); denied (= denied_at_dialog): prompted attempts denied (denial rate at the dialog = denied / prompted); denied_without_dialog: the other denied attempts.';

create or replace view analytics.experiment_arms_daily as
select day, app, experiment, variant,
       sum(attempts)::bigint as attempts, sum(prompted)::bigint as prompted, sum(granted)::bigint as granted,
       sum(limited)::bigint as limited, sum(denied_at_dialog)::bigint as denied,
       sum(denied_at_dialog)::bigint as denied_at_dialog, sum(denied - denied_at_dialog)::bigint as denied_without_dialog
  from projection.experiments_daily
 group by day, app, experiment, variant
having sum(attempts) <> 0;

create or replace view analytics.experiment_arms as
select app, experiment, variant,
       sum(attempts)::bigint as attempts, sum(prompted)::bigint as prompted, sum(granted)::bigint as granted,
       sum(limited)::bigint as limited, sum(denied_at_dialog)::bigint as denied,
       sum(denied_at_dialog)::bigint as denied_at_dialog, sum(denied - denied_at_dialog)::bigint as denied_without_dialog
  from projection.experiments_daily
 group by app, experiment, variant
having sum(attempts) <> 0;

create or replace view analytics.experiment_arms_detail_daily as
select day, app, platform, experiment, variant, attempts, prompted, granted, limited,
       denied_at_dialog as denied, denied_at_dialog, denied - denied_at_dialog as denied_without_dialog
  from projection.experiments_daily
 where attempts <> 0;

create or replace view analytics.priming_arms_by_dimension_daily as
select day, app, platform, os_major, app_version, permission, flow, arm,
       attempts, accepted, declined, prompted, granted, limited,
       denied_at_dialog as denied, denied_at_dialog, denied - denied_at_dialog as denied_without_dialog
  from projection.priming_by_dimension_daily
 where attempts <> 0;

create or replace view analytics.experiment_arms_by_dimension_daily as
select day, app, platform, os_major, app_version, permission, flow, experiment, variant,
       attempts, prompted, granted, limited,
       denied_at_dialog as denied, denied_at_dialog, denied - denied_at_dialog as denied_without_dialog
  from projection.experiments_by_dimension_daily
 where attempts <> 0;
