-- 020: pre-permission arms, experiment arms and picker counts by every dimension.
--
-- `permaudit stats` groups by any of day, week, app, platform, osMajor, appVersion, permission and
-- flow (issue 3), and the contract groups picker metrics "like denial rates". The count tables
-- of the arms have no OS major, app version or flow (experiments no permission either), the
-- picker counts no permission. Three tables beside them keep the same moves by every dimension of
-- the attempt (day, app, platform, os_major, app_version, permission, flow), so any grouping is a
-- sum. The coarser tables stay: the report, the dashboards and the contract's views read them,
-- and they are a fraction of the size (measured at 5M events: reading the finer ones instead made
-- the whole report 4.5 times slower).
--
-- * projection.apply_batch: 016's body with three more inserts in the statement that writes the
--   count tables (the same moves, grouped by the finer keys); nothing else changed. Its security
--   definer, search_path, jit and work_mem settings are restated, since CREATE OR REPLACE drops
--   them.
-- * projection.reset(): 019's body, which also empties the new tables.
-- * Views over the new tables: analytics.priming_arms_by_dimension_daily,
--   analytics.experiment_arms_by_dimension_daily, analytics.picker_adoption_by_dimension_daily.
-- * The projection is reset, as 008 did, so that the new tables hold every attempt: the next
--   `permaudit project` rebuilds it from the log; until then the views are empty.

create table projection.priming_by_dimension_daily (
    day              date not null,
    app              text not null,
    platform         text not null,
    os_major         integer not null,
    app_version      text not null,
    permission       text,
    flow             text,
    arm              text not null check (arm in ('primed', 'unprimed')),
    attempts         bigint not null default 0,
    accepted         bigint not null default 0,
    declined         bigint not null default 0,
    prompted         bigint not null default 0,
    granted          bigint not null default 0,
    limited          bigint not null default 0,
    denied           bigint not null default 0,
    denied_at_dialog bigint not null default 0,
    unique nulls not distinct (day, app, platform, os_major, app_version, permission, flow, arm)
);

create table projection.experiments_by_dimension_daily (
    day              date not null,
    app              text not null,
    platform         text not null,
    os_major         integer not null,
    app_version      text not null,
    permission       text,
    flow             text,
    experiment       text not null,
    variant          text not null,
    attempts         bigint not null default 0,
    prompted         bigint not null default 0,
    granted          bigint not null default 0,
    limited          bigint not null default 0,
    denied           bigint not null default 0,
    denied_at_dialog bigint not null default 0,
    unique nulls not distinct (day, app, platform, os_major, app_version, permission, flow, experiment, variant)
);

create table projection.picker_by_dimension_daily (
    day                 date not null,
    app                 text not null,
    platform            text not null,
    os_major            integer not null,
    app_version         text not null,
    permission          text,
    flow                text,
    picker_attempts     bigint not null default 0,
    picker_completed    bigint not null default 0,
    permission_attempts bigint not null default 0,
    full_access         bigint not null default 0,
    limited_access      bigint not null default 0,
    unique nulls not distinct (day, app, platform, os_major, app_version, permission, flow)
);

-- The owner and the privileges of 011 (reset() and apply_batch run as the owner).
alter table projection.priming_by_dimension_daily owner to permaudit_owner;
alter table projection.experiments_by_dimension_daily owner to permaudit_owner;
alter table projection.picker_by_dimension_daily owner to permaudit_owner;
grant select on projection.priming_by_dimension_daily, projection.experiments_by_dimension_daily,
                projection.picker_by_dimension_daily to permaudit_auditor;

create or replace function projection.reset()
returns void
language sql
security definer
set search_path = pg_catalog, pg_temp
as $$
    select from projection.checkpoint c where c.name = 'analytics' for update;
    select projection.reset_counts();
    delete from projection.intake_minutely;
    delete from projection.intake_hourly;
    delete from projection.priming_by_dimension_daily;
    delete from projection.experiments_by_dimension_daily;
    delete from projection.picker_by_dimension_daily;
$$;

select projection.reset();

create or replace function projection.apply_batch(batch_size integer default 20000)
returns table (events integer, attempts integer, transaction_id xid8, "position" bigint)
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
set jit = off
set work_mem = '64MB'
as $$
declare
    cp record;
    n_events integer;
    n_attempts integer;
begin
    select c.transaction_id, c.position into cp
      from projection.checkpoint c where c.name = 'analytics' for update;

    -- Scratch tables of this batch (dropped at commit; also here, for several batches in one
    -- transaction as in a rebuild).
    drop table if exists pg_temp.batch, pg_temp.touched;

    -- The batch in committed order. outcome: granted | limited | denied | restricted for an
    -- outcome event; state: the outcome or the observed status, for the permission state;
    -- kind: one bit per event type the attempt state records (1 permission.prompted, 2 a prompt
    -- with dialogShown not false, 4 prePermission.shown, 8 prePermission.accepted,
    -- 16 prePermission.declined, 32 picker.opened, 64 picker.completed), so that one bit_or
    -- per attempt collects them all. CASE keeps the attribute casts to the event types whose
    -- attributes the write path validated.
    create temporary table batch on commit drop as
    select e.position, e.transaction_id, e.stream_key, e.type, e.occurred_at, e.recorded_at, e.app, e.platform,
           e.os_major, e.app_version, e.attempt, e.permission, e.flow, e.payload->'experiments' as experiments,
           case when e.type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')
                then substr(e.type, 12) end as outcome,
           case when e.type = 'permission.denied'
                then coalesce((e.payload->'attributes'->>'permanent')::boolean, false) else false end as permanent,
           case e.type when 'permission.prompted'
                then case when coalesce((e.payload->'attributes'->>'dialogShown')::boolean, true) then 3 else 1 end
                when 'prePermission.shown' then 4 when 'prePermission.accepted' then 8 when 'prePermission.declined' then 16
                when 'picker.opened' then 32 when 'picker.completed' then 64 else 0 end as kind,
           case when e.type = 'permission.statusObserved' then e.payload->'attributes'->>'status'
                when e.type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')
                then substr(e.type, 12) end as state
      from audit.events e
     where (e.transaction_id, e.position) > (cp.transaction_id, cp.position)
       and e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
     order by e.transaction_id, e.position
     limit batch_size;
    get diagnostics n_events = row_count;
    if n_events = 0 then
        return query select 0, 0, cp.transaction_id, cp.position;
        return;
    end if;

    -- 1. What this batch says about each attempt it touches. Its events are numbered (rn) in
    --    (occurred_at, position) order; over the attempt, min/max give the number of the
    --    earliest event with a permission, a flow, experiments and of the latest outcome (rn 1
    --    is the earliest event), and bit_or the kinds of events it contains. Only the chosen
    --    events are kept, and the grouping takes each value from the event with its number.
    --    One sort serves the numbering, the choices and the grouping.
    create temporary table touched on commit drop as
    select s.app, s.attempt,
           max(s.stream_key) filter (where s.rn = 1) as stream_key,
           max(s.occurred_at) filter (where s.rn = 1) as first_at, max(s.position) filter (where s.rn = 1) as first_pos,
           max(s.platform) filter (where s.rn = 1) as platform, max(s.os_major) filter (where s.rn = 1) as os_major,
           max(s.app_version) filter (where s.rn = 1) as app_version,
           max(s.permission) filter (where s.rn = s.permission_rn) as permission,
           max(s.occurred_at) filter (where s.rn = s.permission_rn) as permission_at,
           max(s.position) filter (where s.rn = s.permission_rn) as permission_pos,
           max(s.flow) filter (where s.rn = s.flow_rn) as flow,
           max(s.occurred_at) filter (where s.rn = s.flow_rn) as flow_at,
           max(s.position) filter (where s.rn = s.flow_rn) as flow_pos,
           (array_agg(s.experiments) filter (where s.rn = s.experiments_rn))[1] as experiments,
           max(s.occurred_at) filter (where s.rn = s.experiments_rn) as experiments_at,
           max(s.position) filter (where s.rn = s.experiments_rn) as experiments_pos,
           max(s.outcome) filter (where s.rn = s.outcome_rn) as outcome,
           max(s.occurred_at) filter (where s.rn = s.outcome_rn) as outcome_at,
           max(s.position) filter (where s.rn = s.outcome_rn) as outcome_pos,
           coalesce(bool_or(s.permanent) filter (where s.rn = s.outcome_rn), false) as outcome_permanent,
           max(s.kinds) & 2 <> 0 as prompted_dialog, max(s.kinds) & 1 <> 0 as prompted_any,
           max(s.kinds) & 4 <> 0 as pre_shown, max(s.kinds) & 8 <> 0 as pre_accepted, max(s.kinds) & 16 <> 0 as pre_declined,
           max(s.kinds) & 32 <> 0 as picker_opened, max(s.kinds) & 64 <> 0 as picker_completed
      from (select n.*,
                   min(n.rn) filter (where n.permission is not null) over a as permission_rn,
                   min(n.rn) filter (where n.flow is not null) over a as flow_rn,
                   min(n.rn) filter (where n.experiments is not null) over a as experiments_rn,
                   max(n.rn) filter (where n.outcome is not null) over a as outcome_rn,
                   bit_or(n.kind) over a as kinds
              from (select b.app, b.attempt, b.stream_key, b.occurred_at, b.position, b.platform, b.os_major, b.app_version,
                           b.permission, b.flow, b.experiments, b.outcome, b.permanent, b.kind,
                           row_number() over (partition by b.attempt, b.app order by b.occurred_at, b.position) as rn
                      from batch b
                     where b.attempt is not null) as n
            window a as (partition by n.attempt, n.app)) as s
     where s.rn = 1 or s.rn = s.permission_rn or s.rn = s.flow_rn or s.rn = s.experiments_rn or s.rn = s.outcome_rn
     group by s.attempt, s.app;
    get diagnostics n_attempts = row_count;

    -- 2. Their states before (old) and after (new) this batch: the earliest of old and new for
    --    the day and each dimension, the later outcome, the flags or-ed. 3. Each touched
    --    attempt's contribution moves in the count tables: -1 for its old state, +1 for its new
    --    one. 4. The new states are stored: new attempts inserted (in key order), known ones
    --    updated. One statement: the steps hand their rows on in memory, and every step reads
    --    projection.attempts as it was before the batch.
    with probed as materialized (
        -- each touched attempt with its stored state and that row's address, if it has one: one
        -- primary-key probe per attempt (LIMIT 1 keeps it a probe; as a join, the planner, which
        -- cannot estimate the scratch table, hashed every stored state)
        select t as batch_state, s.stored_state, s.stored_ctid
          from touched t
          left join lateral (select a as stored_state, a.ctid as stored_ctid from projection.attempts a
                              where a.attempt = t.attempt and a.app = t.app limit 1) as s on true
    ), old_states as materialized (
        select (p.stored_state).* from probed p where p.stored_ctid is not null
    ), new_states as materialized (
        -- attempts first seen in this batch: their state is what the batch says
        select (p.batch_state).*, null::tid as stored_ctid from probed p where p.stored_ctid is null
        union all
        -- attempts seen before: the batch's state merged into the stored one
        select t.app, t.attempt,
               case when (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.stream_key else o.stream_key end as stream_key,
               case when (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.first_at else o.first_at end as first_at,
               case when (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.first_pos else o.first_pos end as first_pos,
               case when (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.platform else o.platform end as platform,
               case when (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.os_major else o.os_major end as os_major,
               case when (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.app_version else o.app_version end as app_version,
               case when o.permission_at is null or (t.permission_at, t.permission_pos) < (o.permission_at, o.permission_pos) then t.permission else o.permission end as permission,
               case when o.permission_at is null or (t.permission_at, t.permission_pos) < (o.permission_at, o.permission_pos) then t.permission_at else o.permission_at end as permission_at,
               case when o.permission_at is null or (t.permission_at, t.permission_pos) < (o.permission_at, o.permission_pos) then t.permission_pos else o.permission_pos end as permission_pos,
               case when o.flow_at is null or (t.flow_at, t.flow_pos) < (o.flow_at, o.flow_pos) then t.flow else o.flow end as flow,
               case when o.flow_at is null or (t.flow_at, t.flow_pos) < (o.flow_at, o.flow_pos) then t.flow_at else o.flow_at end as flow_at,
               case when o.flow_at is null or (t.flow_at, t.flow_pos) < (o.flow_at, o.flow_pos) then t.flow_pos else o.flow_pos end as flow_pos,
               case when o.experiments_at is null or (t.experiments_at, t.experiments_pos) < (o.experiments_at, o.experiments_pos) then t.experiments else o.experiments end as experiments,
               case when o.experiments_at is null or (t.experiments_at, t.experiments_pos) < (o.experiments_at, o.experiments_pos) then t.experiments_at else o.experiments_at end as experiments_at,
               case when o.experiments_at is null or (t.experiments_at, t.experiments_pos) < (o.experiments_at, o.experiments_pos) then t.experiments_pos else o.experiments_pos end as experiments_pos,
               case when o.outcome_at is null or (t.outcome_at, t.outcome_pos) > (o.outcome_at, o.outcome_pos) then t.outcome else o.outcome end as outcome,
               case when o.outcome_at is null or (t.outcome_at, t.outcome_pos) > (o.outcome_at, o.outcome_pos) then t.outcome_at else o.outcome_at end as outcome_at,
               case when o.outcome_at is null or (t.outcome_at, t.outcome_pos) > (o.outcome_at, o.outcome_pos) then t.outcome_pos else o.outcome_pos end as outcome_pos,
               case when o.outcome_at is null or (t.outcome_at, t.outcome_pos) > (o.outcome_at, o.outcome_pos) then t.outcome_permanent else o.outcome_permanent end as outcome_permanent,
               t.prompted_dialog or coalesce(o.prompted_dialog, false) as prompted_dialog,
               t.prompted_any or coalesce(o.prompted_any, false) as prompted_any,
               t.pre_shown or coalesce(o.pre_shown, false) as pre_shown,
               t.pre_accepted or coalesce(o.pre_accepted, false) as pre_accepted,
               t.pre_declined or coalesce(o.pre_declined, false) as pre_declined,
               t.picker_opened or coalesce(o.picker_opened, false) as picker_opened,
               t.picker_completed or coalesce(o.picker_completed, false) as picker_completed,
               p.stored_ctid
          from probed p
         cross join lateral (select (p.batch_state).*) as t
         cross join lateral (select (p.stored_state).*) as o
         where p.stored_ctid is not null
    ), moves as materialized (
        select -1 as sign, (s.first_at at time zone 'UTC')::date as day, s.app, s.platform, s.os_major, s.app_version,
               s.permission, s.flow, s.experiments, s.outcome, s.outcome_permanent, s.prompted_dialog, s.pre_shown,
               s.pre_accepted, s.pre_declined, s.picker_opened, s.picker_completed, s.prompted_any or s.pre_shown as permission_attempt
          from old_states s
        union all
        select 1, (s.first_at at time zone 'UTC')::date, s.app, s.platform, s.os_major, s.app_version,
               s.permission, s.flow, s.experiments, s.outcome, s.outcome_permanent, s.prompted_dialog, s.pre_shown,
               s.pre_accepted, s.pre_declined, s.picker_opened, s.picker_completed, s.prompted_any or s.pre_shown
          from new_states s
    ), outcomes as (
        insert into projection.outcomes_daily as d
               (day, app, platform, os_major, app_version, permission, flow,
                prompted, granted, limited, denied, denied_permanent, restricted)
        select day, app, platform, os_major, app_version, permission, flow,
               sum(sign), coalesce(sum(sign) filter (where outcome = 'granted'), 0),
               coalesce(sum(sign) filter (where outcome = 'limited'), 0), coalesce(sum(sign) filter (where outcome = 'denied'), 0),
               coalesce(sum(sign) filter (where outcome = 'denied' and outcome_permanent), 0),
               coalesce(sum(sign) filter (where outcome = 'restricted'), 0)
          from moves where prompted_dialog
         group by day, app, platform, os_major, app_version, permission, flow
        on conflict (day, app, platform, os_major, app_version, permission, flow) do update set
               prompted = d.prompted + excluded.prompted,
               granted = d.granted + excluded.granted, limited = d.limited + excluded.limited,
               denied = d.denied + excluded.denied, denied_permanent = d.denied_permanent + excluded.denied_permanent,
               restricted = d.restricted + excluded.restricted
    ), priming as (
        insert into projection.priming_daily as d
               (day, app, platform, permission, arm, attempts, accepted, declined, prompted, granted, limited, denied,
                denied_at_dialog)
        select day, app, platform, permission, case when pre_shown then 'primed' else 'unprimed' end,
               sum(sign), coalesce(sum(sign) filter (where pre_shown and pre_accepted), 0),
               coalesce(sum(sign) filter (where pre_shown and pre_declined), 0),
               coalesce(sum(sign) filter (where prompted_dialog), 0),
               coalesce(sum(sign) filter (where outcome = 'granted'), 0), coalesce(sum(sign) filter (where outcome = 'limited'), 0),
               coalesce(sum(sign) filter (where outcome = 'denied'), 0),
               coalesce(sum(sign) filter (where prompted_dialog and outcome = 'denied'), 0)
          from moves where permission_attempt
         group by 1, 2, 3, 4, 5
        on conflict (day, app, platform, permission, arm) do update set
               attempts = d.attempts + excluded.attempts, accepted = d.accepted + excluded.accepted,
               declined = d.declined + excluded.declined, prompted = d.prompted + excluded.prompted,
               granted = d.granted + excluded.granted, limited = d.limited + excluded.limited,
               denied = d.denied + excluded.denied, denied_at_dialog = d.denied_at_dialog + excluded.denied_at_dialog
    ), experiments as (
        insert into projection.experiments_daily as d
               (day, app, platform, experiment, variant, attempts, prompted, granted, limited, denied, denied_at_dialog)
        select m.day, m.app, m.platform, x.key, x.value,
               sum(m.sign), coalesce(sum(m.sign) filter (where m.prompted_dialog), 0),
               coalesce(sum(m.sign) filter (where m.outcome = 'granted'), 0), coalesce(sum(m.sign) filter (where m.outcome = 'limited'), 0),
               coalesce(sum(m.sign) filter (where m.outcome = 'denied'), 0),
               coalesce(sum(m.sign) filter (where m.prompted_dialog and m.outcome = 'denied'), 0)
          from moves m, jsonb_each_text(m.experiments) as x(key, value)
         where m.permission_attempt and m.experiments is not null
         group by 1, 2, 3, 4, 5
        on conflict (day, app, platform, experiment, variant) do update set
               attempts = d.attempts + excluded.attempts, prompted = d.prompted + excluded.prompted,
               granted = d.granted + excluded.granted, limited = d.limited + excluded.limited,
               denied = d.denied + excluded.denied, denied_at_dialog = d.denied_at_dialog + excluded.denied_at_dialog
    ), picker as (
        insert into projection.picker_daily as d
               (day, app, platform, os_major, app_version, flow,
                picker_attempts, picker_completed, permission_attempts, full_access, limited_access)
        select day, app, platform, os_major, app_version, flow,
               coalesce(sum(sign) filter (where picker_opened and not permission_attempt), 0),
               coalesce(sum(sign) filter (where picker_opened and not permission_attempt and picker_completed), 0),
               coalesce(sum(sign) filter (where permission_attempt), 0),
               coalesce(sum(sign) filter (where permission_attempt and outcome = 'granted'), 0),
               coalesce(sum(sign) filter (where permission_attempt and outcome = 'limited'), 0)
          from moves where permission_attempt or picker_opened
         group by 1, 2, 3, 4, 5, 6
        on conflict (day, app, platform, os_major, app_version, flow) do update set
               picker_attempts = d.picker_attempts + excluded.picker_attempts,
               picker_completed = d.picker_completed + excluded.picker_completed,
               permission_attempts = d.permission_attempts + excluded.permission_attempts,
               full_access = d.full_access + excluded.full_access,
               limited_access = d.limited_access + excluded.limited_access
    ), priming_by_dimension as (
        -- 020: the same moves by every dimension of the attempt
        insert into projection.priming_by_dimension_daily as d
               (day, app, platform, os_major, app_version, permission, flow, arm, attempts, accepted, declined, prompted,
                granted, limited, denied, denied_at_dialog)
        select day, app, platform, os_major, app_version, permission, flow, case when pre_shown then 'primed' else 'unprimed' end,
               sum(sign), coalesce(sum(sign) filter (where pre_shown and pre_accepted), 0),
               coalesce(sum(sign) filter (where pre_shown and pre_declined), 0),
               coalesce(sum(sign) filter (where prompted_dialog), 0),
               coalesce(sum(sign) filter (where outcome = 'granted'), 0), coalesce(sum(sign) filter (where outcome = 'limited'), 0),
               coalesce(sum(sign) filter (where outcome = 'denied'), 0),
               coalesce(sum(sign) filter (where prompted_dialog and outcome = 'denied'), 0)
          from moves where permission_attempt
         group by 1, 2, 3, 4, 5, 6, 7, 8
        on conflict (day, app, platform, os_major, app_version, permission, flow, arm) do update set
               attempts = d.attempts + excluded.attempts, accepted = d.accepted + excluded.accepted,
               declined = d.declined + excluded.declined, prompted = d.prompted + excluded.prompted,
               granted = d.granted + excluded.granted, limited = d.limited + excluded.limited,
               denied = d.denied + excluded.denied, denied_at_dialog = d.denied_at_dialog + excluded.denied_at_dialog
    ), experiments_by_dimension as (
        insert into projection.experiments_by_dimension_daily as d
               (day, app, platform, os_major, app_version, permission, flow, experiment, variant,
                attempts, prompted, granted, limited, denied, denied_at_dialog)
        select m.day, m.app, m.platform, m.os_major, m.app_version, m.permission, m.flow, x.key, x.value,
               sum(m.sign), coalesce(sum(m.sign) filter (where m.prompted_dialog), 0),
               coalesce(sum(m.sign) filter (where m.outcome = 'granted'), 0), coalesce(sum(m.sign) filter (where m.outcome = 'limited'), 0),
               coalesce(sum(m.sign) filter (where m.outcome = 'denied'), 0),
               coalesce(sum(m.sign) filter (where m.prompted_dialog and m.outcome = 'denied'), 0)
          from moves m, jsonb_each_text(m.experiments) as x(key, value)
         where m.permission_attempt and m.experiments is not null
         group by 1, 2, 3, 4, 5, 6, 7, 8, 9
        on conflict (day, app, platform, os_major, app_version, permission, flow, experiment, variant) do update set
               attempts = d.attempts + excluded.attempts, prompted = d.prompted + excluded.prompted,
               granted = d.granted + excluded.granted, limited = d.limited + excluded.limited,
               denied = d.denied + excluded.denied, denied_at_dialog = d.denied_at_dialog + excluded.denied_at_dialog
    ), picker_by_dimension as (
        insert into projection.picker_by_dimension_daily as d
               (day, app, platform, os_major, app_version, permission, flow,
                picker_attempts, picker_completed, permission_attempts, full_access, limited_access)
        select day, app, platform, os_major, app_version, permission, flow,
               coalesce(sum(sign) filter (where picker_opened and not permission_attempt), 0),
               coalesce(sum(sign) filter (where picker_opened and not permission_attempt and picker_completed), 0),
               coalesce(sum(sign) filter (where permission_attempt), 0),
               coalesce(sum(sign) filter (where permission_attempt and outcome = 'granted'), 0),
               coalesce(sum(sign) filter (where permission_attempt and outcome = 'limited'), 0)
          from moves where permission_attempt or picker_opened
         group by 1, 2, 3, 4, 5, 6, 7
        on conflict (day, app, platform, os_major, app_version, permission, flow) do update set
               picker_attempts = d.picker_attempts + excluded.picker_attempts,
               picker_completed = d.picker_completed + excluded.picker_completed,
               permission_attempts = d.permission_attempts + excluded.permission_attempts,
               full_access = d.full_access + excluded.full_access,
               limited_access = d.limited_access + excluded.limited_access
    ), inserted as (
        insert into projection.attempts
               (app, attempt, stream_key, first_at, first_pos, platform, os_major, app_version,
                permission, permission_at, permission_pos, flow, flow_at, flow_pos, experiments, experiments_at, experiments_pos,
                outcome, outcome_at, outcome_pos, outcome_permanent, prompted_dialog, prompted_any, pre_shown, pre_accepted,
                pre_declined, picker_opened, picker_completed)
        select app, attempt, stream_key, first_at, first_pos, platform, os_major, app_version,
               permission, permission_at, permission_pos, flow, flow_at, flow_pos, experiments, experiments_at, experiments_pos,
               outcome, outcome_at, outcome_pos, outcome_permanent, prompted_dialog, prompted_any, pre_shown, pre_accepted,
               pre_declined, picker_opened, picker_completed
          from new_states where stored_ctid is null
         order by attempt, app
    )
    update projection.attempts a set
           stream_key = n.stream_key, first_at = n.first_at, first_pos = n.first_pos,
           platform = n.platform, os_major = n.os_major, app_version = n.app_version,
           permission = n.permission, permission_at = n.permission_at, permission_pos = n.permission_pos,
           flow = n.flow, flow_at = n.flow_at, flow_pos = n.flow_pos,
           experiments = n.experiments, experiments_at = n.experiments_at, experiments_pos = n.experiments_pos,
           outcome = n.outcome, outcome_at = n.outcome_at, outcome_pos = n.outcome_pos,
           outcome_permanent = n.outcome_permanent, prompted_dialog = n.prompted_dialog,
           prompted_any = n.prompted_any, pre_shown = n.pre_shown, pre_accepted = n.pre_accepted,
           pre_declined = n.pre_declined, picker_opened = n.picker_opened, picker_completed = n.picker_completed
      from new_states n
     where a.ctid = any (array(select m.stored_ctid from new_states m where m.stored_ctid is not null))
       and a.ctid = n.stored_ctid;

    -- 5. Current permission state per (app, install, permission): the latest outcome or observed
    --    status by (occurred_at, position); notDetermined while there is none. The stream key
    --    names the install within its app.
    with states as materialized (
        select distinct on (b.stream_key, b.permission collate "C")
               b.app, b.stream_key, b.permission, b.state,
               case when b.state is not null then b.occurred_at end as since,
               case when b.state is not null then b.position end as state_pos
          from batch b
         where b.permission is not null
         order by b.stream_key, b.permission collate "C", b.state is not null desc, b.occurred_at desc, b.position desc
    ), stored as materialized (
        -- one primary-key probe per key; apply_batch callers take turns on the checkpoint row,
        -- so no other writer can add a key between this probe and the insert below
        select s.*, p.since as stored_since, p.state_pos as stored_pos, p.ctid as stored_ctid
          from states s
          left join lateral (select p.ctid, p.since, p.state_pos from projection.permission_state p
                              where p.app = s.app and p.stream_key = s.stream_key and p.permission = s.permission
                              limit 1) as p on true
    ), inserted as (
        insert into projection.permission_state (app, stream_key, permission, state, since, state_pos)
        select app, stream_key, permission, coalesce(state, 'notDetermined'), since, state_pos
          from stored where stored_ctid is null
    ), later as materialized (
        select * from stored
         where stored_ctid is not null and state is not null
           and (stored_since is null or (since, state_pos) > (stored_since, stored_pos))
    )
    update projection.permission_state p
       set state = s.state, since = s.since, state_pos = s.state_pos
      from later s
     where p.ctid = any (array(select l.stored_ctid from later l)) and p.ctid = s.stored_ctid;

    -- 6. Events per day, and the late ones: an event is late when an event of the same install
    --    that occurred after it is earlier in the log (it was delivered out of order). The
    --    install's clock (latest occurred_at projected so far) is read once per install.
    with streams as materialized (
        select s.stream_key, s.latest_at, c.latest_at as clock_at
          from (select b.stream_key, max(b.occurred_at) as latest_at from batch b group by b.stream_key) as s
          left join projection.stream_clock c on c.stream_key = s.stream_key
    ), daily as (
        insert into projection.events_daily as d (day, app, platform, events, late_events)
        select day, app, platform, count(*), count(*) filter (where late)
          from (select (b.occurred_at at time zone 'UTC')::date as day, b.app, b.platform,
                       b.occurred_at < greatest(s.clock_at,
                                                max(b.occurred_at) over (partition by b.stream_key order by b.position
                                                                         rows between unbounded preceding and 1 preceding)) as late
                  from batch b join streams s on s.stream_key = b.stream_key) as arrivals
         group by 1, 2, 3
        on conflict (day, app, platform) do update set
               events = d.events + excluded.events, late_events = d.late_events + excluded.late_events
    ), clocked as (
        insert into projection.stream_clock (stream_key, latest_at)
        select s.stream_key, s.latest_at from streams s where s.clock_at is null
    )
    update projection.stream_clock c set latest_at = s.latest_at
      from streams s
     where c.stream_key = s.stream_key and s.latest_at > s.clock_at;

    -- 7. Events per minute and hour of recorded_at (009), from the same rows.
    with minutes as (
        select date_bin('1 minute', b.recorded_at, timestamptz '2000-01-01 00:00:00+00') as minute, b.app, b.platform,
               count(*) as n
          from batch b
         group by 1, 2, 3
    ), by_minute as (
        insert into projection.intake_minutely as m (minute, app, platform, events)
        select x.minute, x.app, x.platform, x.n from minutes x
        on conflict on constraint intake_minutely_pkey do update set events = m.events + excluded.events
    )
    insert into projection.intake_hourly as h (hour, app, platform, events)
    select date_bin('1 hour', x.minute, timestamptz '2000-01-01 00:00:00+00'), x.app, x.platform, sum(x.n)
      from minutes x
     group by 1, 2, 3
    on conflict on constraint intake_hourly_pkey do update set events = h.events + excluded.events;

    -- 8. Advance the checkpoint.
    select b.transaction_id, b.position into cp from batch b order by b.transaction_id desc, b.position desc limit 1;
    update projection.checkpoint c
       set transaction_id = cp.transaction_id, position = cp.position,
           events_projected = c.events_projected + n_events, updated_at = now()
     where c.name = 'analytics';

    return query select n_events, n_attempts, cp.transaction_id, cp.position;
end;
$$;
comment on function projection.apply_batch(integer) is
    'One incremental step of the projector: count tables, permission states, late-event clock, intake counts and checkpoint, in the caller''s transaction.';

create view analytics.priming_arms_by_dimension_daily as
select day, app, platform, os_major, app_version, permission, flow, arm,
       attempts, accepted, declined, prompted, granted, limited, denied, denied_at_dialog
  from projection.priming_by_dimension_daily
 where attempts <> 0;
comment on view analytics.priming_arms_by_dimension_daily is
    'Permission attempts per day, app, platform, OS major, app version, permission, flow and arm (primed / unprimed).';

create view analytics.experiment_arms_by_dimension_daily as
select day, app, platform, os_major, app_version, permission, flow, experiment, variant,
       attempts, prompted, granted, limited, denied, denied_at_dialog
  from projection.experiments_by_dimension_daily
 where attempts <> 0;
comment on view analytics.experiment_arms_by_dimension_daily is
    'Permission attempts carrying an experiment key, per day, app, platform, OS major, app version, permission, flow, experiment and variant.';

create view analytics.picker_adoption_by_dimension_daily as
select day, app, platform, os_major, app_version, permission, flow,
       picker_attempts, picker_completed, permission_attempts, full_access, limited_access
  from projection.picker_by_dimension_daily
 where picker_attempts <> 0 or permission_attempts <> 0;
comment on view analytics.picker_adoption_by_dimension_daily is
    'Picker attempts and permission attempts per day, app, platform, OS major, app version, permission (of the attempt, if any) and flow.';

-- The owner and the privileges of 011 for the views.
alter view analytics.priming_arms_by_dimension_daily owner to permaudit_owner;
alter view analytics.experiment_arms_by_dimension_daily owner to permaudit_owner;
alter view analytics.picker_adoption_by_dimension_daily owner to permaudit_owner;
grant select on analytics.priming_arms_by_dimension_daily, analytics.experiment_arms_by_dimension_daily,
                analytics.picker_adoption_by_dimension_daily to permaudit_analyst, permaudit_auditor;
