-- 026: the one-pass build in two server processes.
--
-- projection.build_from_log() (022, 023, 025) runs its four reads of the log one after the
-- other in one backend, which leaves the second core of a small machine idle. Its steps split in
-- two independent parts: the attempts and every count table (steps 1 and 2, about two thirds of
-- the time), and the tables of installs and intake (steps 3 and 4: permission states, events per
-- day and late events, install clocks, events per minute and hour). The projector now runs the
-- second part on a second connection, in its own transaction, into staging tables, while its own
-- transaction builds the attempts; it then copies the staged rows and sets the checkpoint in that
-- one transaction, so readers still see the whole projection or none of it:
--
--     connection 1 (one transaction)            connection 2 (autocommit)
--     h := projection.build_horizon()
--                                                projection.stage_install_tables(h)
--     projection.build_attempts(h)                 (runs meanwhile, commits the staged rows)
--     (waits for connection 2)
--     projection.finish_build(h)
--
-- Both parts read only events of transactions below the horizon h, which had all ended when
-- connection 1 took it: each part sees the same events whichever snapshot it reads with.
-- build_from_log() keeps its contract for a single connection (a DBA, psql): it calls the same
-- functions one after the other. Every step's statement is 023's, unchanged; steps 3 and 4 write
-- the staging tables instead of the projection.
--
-- The staging tables are UNLOGGED (not written to the WAL, emptied by crash recovery): they hold
-- rows only between stage_install_tables and finish_build, which copies and truncates them in
-- the building transaction; a build that dies leaves nothing the next one reads (it checks the
-- horizon the rows were staged for).

create unlogged table projection.staged_build (horizon xid8 not null);
create unlogged table projection.staged_permission_state (like projection.permission_state);
create unlogged table projection.staged_events_daily (like projection.events_daily);
create unlogged table projection.staged_stream_clock (like projection.stream_clock);
create unlogged table projection.staged_intake_minutely (like projection.intake_minutely);
create unlogged table projection.staged_intake_hourly (like projection.intake_hourly);

-- The build's horizon, or null when the projection is not empty (the checkpoint past the start).
-- An empty checkpoint row is locked until the building transaction ends: a second builder waits,
-- then finds the projection built.
create function projection.build_horizon()
returns xid8
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    if not exists (select from projection.checkpoint c
                    where c.name = 'analytics' and (c.transaction_id, c.position) = ('0'::xid8, 0::bigint)) then
        return null;
    end if;
    -- empty: lock the row and read it again (another projector may have built meanwhile)
    if not exists (select from projection.checkpoint c
                    where c.name = 'analytics' and (c.transaction_id, c.position) = ('0'::xid8, 0::bigint)
                      for update) then
        return null;
    end if;
    return pg_snapshot_xmin(pg_current_snapshot());
end;
$$;

-- A horizon is usable while every transaction below it has ended: not above the oldest running
-- transaction now (that only moves forward, so a horizon taken earlier stays usable).
create function projection.check_build_horizon(horizon xid8, building boolean)
returns void
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
begin
    if horizon is null or horizon > pg_snapshot_xmin(pg_current_snapshot()) then
        raise exception 'build horizon % is not below the oldest running transaction', horizon
              using errcode = '22023', hint = 'take it with projection.build_horizon()';
    end if;
    if building and not exists (select from projection.checkpoint c
                                 where c.name = 'analytics' and (c.transaction_id, c.position) = ('0'::xid8, 0::bigint)
                                   for update) then
        raise exception 'the projection is not empty: a one-pass build needs the checkpoint at the start of the log'
              using errcode = '55000', hint = 'projection.reset() empties it';
    end if;
end;
$$;

-- Steps 1 and 2: the attempts and every count table; returns the number of attempts.
create function projection.build_attempts(horizon xid8)
returns bigint
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
set jit = off
set work_mem = '32MB'
set hash_mem_multiplier = 1
as $$
declare
    n_attempts bigint;
begin
    perform projection.check_build_horizon(horizon, true);

    with folded as (
        insert into projection.attempts
               (app, attempt, stream_key, first_at, first_pos, platform, os_major, app_version,
                permission, permission_at, permission_pos, flow, flow_at, flow_pos, experiments, experiments_at, experiments_pos,
                outcome, outcome_at, outcome_pos, outcome_permanent, prompted_dialog, prompted_any, pre_shown, pre_accepted,
                pre_declined, picker_opened, picker_completed)
        select s.app, s.attempt,
               max(s.stream_key) filter (where s.rn = 1),
               max(s.occurred_at) filter (where s.rn = 1), max(s.position) filter (where s.rn = 1),
               max(s.platform) filter (where s.rn = 1), max(s.os_major) filter (where s.rn = 1),
               max(s.app_version) filter (where s.rn = 1),
               max(s.permission) filter (where s.rn = s.permission_rn),
               max(s.occurred_at) filter (where s.rn = s.permission_rn),
               max(s.position) filter (where s.rn = s.permission_rn),
               max(s.flow) filter (where s.rn = s.flow_rn),
               max(s.occurred_at) filter (where s.rn = s.flow_rn),
               max(s.position) filter (where s.rn = s.flow_rn),
               (array_agg(s.experiments) filter (where s.rn = s.experiments_rn))[1],
               max(s.occurred_at) filter (where s.rn = s.experiments_rn),
               max(s.position) filter (where s.rn = s.experiments_rn),
               max(s.outcome) filter (where s.rn = s.outcome_rn),
               max(s.occurred_at) filter (where s.rn = s.outcome_rn),
               max(s.position) filter (where s.rn = s.outcome_rn),
               coalesce(bool_or(s.permanent) filter (where s.rn = s.outcome_rn), false),
               max(s.kinds) & 2 <> 0, max(s.kinds) & 1 <> 0,
               max(s.kinds) & 4 <> 0, max(s.kinds) & 8 <> 0, max(s.kinds) & 16 <> 0,
               max(s.kinds) & 32 <> 0, max(s.kinds) & 64 <> 0
          from (select n.*,
                       min(n.rn) filter (where n.permission is not null) over a as permission_rn,
                       min(n.rn) filter (where n.flow is not null) over a as flow_rn,
                       min(n.rn) filter (where n.experiments is not null) over a as experiments_rn,
                       max(n.rn) filter (where n.outcome is not null) over a as outcome_rn,
                       bit_or(n.kind) over a as kinds
                  from (select e.*,
                               row_number() over (partition by e.attempt, e.app order by e.occurred_at, e.position) as rn
                          from (select e.app, e.attempt, e.stream_key, e.occurred_at, e.position, e.platform, e.os_major,
                                       e.app_version, e.permission, e.flow, e.payload->'experiments' as experiments,
                                       case when e.type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')
                                            then substr(e.type, 12) end as outcome,
                                       case when e.type = 'permission.denied'
                                            then coalesce((e.payload->'attributes'->>'permanent')::boolean, false) else false end as permanent,
                                       case e.type when 'permission.prompted'
                                            then case when coalesce((e.payload->'attributes'->>'dialogShown')::boolean, true) then 3 else 1 end
                                            when 'prePermission.shown' then 4 when 'prePermission.accepted' then 8
                                            when 'prePermission.declined' then 16 when 'picker.opened' then 32
                                            when 'picker.completed' then 64 else 0 end as kind
                                  from audit.events e
                                 where e.transaction_id < horizon and e.attempt is not null
                                offset 0) as e) as n
                window a as (partition by n.attempt, n.app)) as s
         where s.rn = 1 or s.rn = s.permission_rn or s.rn = s.flow_rn or s.rn = s.experiments_rn or s.rn = s.outcome_rn
         group by s.attempt, s.app
        returning (first_at at time zone 'UTC')::date as day, app, platform, os_major, app_version, permission, flow,
                  experiments, outcome, outcome_permanent, prompted_dialog, pre_shown, pre_accepted, pre_declined,
                  picker_opened, picker_completed, prompted_any or pre_shown as permission_attempt
    ), states as materialized (
        select day, app, platform, os_major, app_version, permission, flow, outcome, outcome_permanent, prompted_dialog,
               pre_shown, pre_accepted, pre_declined, picker_opened, picker_completed, permission_attempt, count(*) as n
          from folded
         group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
    ), arms as materialized (
        -- permission attempts by each experiment key they carry (jsonb_object_keys, not
        -- jsonb_each_text: see the head of this file)
        select f.day, f.app, f.platform, f.os_major, f.app_version, f.permission, f.flow, x.key as experiment,
               f.experiments->>x.key as variant, f.outcome, f.prompted_dialog, count(*) as n
          from folded f, jsonb_object_keys(f.experiments) as x(key)
         where f.permission_attempt and f.experiments is not null
         group by 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
    ), outcomes as (
        insert into projection.outcomes_daily
               (day, app, platform, os_major, app_version, permission, flow,
                prompted, granted, limited, denied, denied_permanent, restricted)
        select day, app, platform, os_major, app_version, permission, flow,
               sum(n), coalesce(sum(n) filter (where outcome = 'granted'), 0), coalesce(sum(n) filter (where outcome = 'limited'), 0),
               coalesce(sum(n) filter (where outcome = 'denied'), 0), coalesce(sum(n) filter (where outcome = 'denied' and outcome_permanent), 0),
               coalesce(sum(n) filter (where outcome = 'restricted'), 0)
          from states where prompted_dialog
         group by 1, 2, 3, 4, 5, 6, 7
    ), priming_by_dimension as (
        insert into projection.priming_by_dimension_daily as d
               (day, app, platform, os_major, app_version, permission, flow, arm, attempts, accepted, declined, prompted,
                granted, limited, denied, denied_at_dialog)
        select day, app, platform, os_major, app_version, permission, flow, case when pre_shown then 'primed' else 'unprimed' end,
               sum(n), coalesce(sum(n) filter (where pre_shown and pre_accepted), 0), coalesce(sum(n) filter (where pre_shown and pre_declined), 0),
               coalesce(sum(n) filter (where prompted_dialog), 0), coalesce(sum(n) filter (where outcome = 'granted'), 0),
               coalesce(sum(n) filter (where outcome = 'limited'), 0), coalesce(sum(n) filter (where outcome = 'denied'), 0),
               coalesce(sum(n) filter (where prompted_dialog and outcome = 'denied'), 0)
          from states where permission_attempt
         group by 1, 2, 3, 4, 5, 6, 7, 8
        returning d.*
    ), priming as (
        -- the coarser tables are sums of the finer ones
        insert into projection.priming_daily
               (day, app, platform, permission, arm, attempts, accepted, declined, prompted, granted, limited, denied,
                denied_at_dialog)
        select p.day, p.app, p.platform, p.permission, p.arm, sum(p.attempts), sum(p.accepted), sum(p.declined), sum(p.prompted),
               sum(p.granted), sum(p.limited), sum(p.denied), sum(p.denied_at_dialog)
          from priming_by_dimension p
         group by 1, 2, 3, 4, 5
    ), experiments_by_dimension as (
        insert into projection.experiments_by_dimension_daily as d
               (day, app, platform, os_major, app_version, permission, flow, experiment, variant,
                attempts, prompted, granted, limited, denied, denied_at_dialog)
        select day, app, platform, os_major, app_version, permission, flow, experiment, variant,
               sum(n), coalesce(sum(n) filter (where prompted_dialog), 0), coalesce(sum(n) filter (where outcome = 'granted'), 0),
               coalesce(sum(n) filter (where outcome = 'limited'), 0), coalesce(sum(n) filter (where outcome = 'denied'), 0),
               coalesce(sum(n) filter (where prompted_dialog and outcome = 'denied'), 0)
          from arms
         group by 1, 2, 3, 4, 5, 6, 7, 8, 9
        returning d.*
    ), experiments as (
        insert into projection.experiments_daily
               (day, app, platform, experiment, variant, attempts, prompted, granted, limited, denied, denied_at_dialog)
        select x.day, x.app, x.platform, x.experiment, x.variant, sum(x.attempts), sum(x.prompted), sum(x.granted),
               sum(x.limited), sum(x.denied), sum(x.denied_at_dialog)
          from experiments_by_dimension x
         group by 1, 2, 3, 4, 5
    ), picker_by_dimension as (
        insert into projection.picker_by_dimension_daily as d
               (day, app, platform, os_major, app_version, permission, flow,
                picker_attempts, picker_completed, permission_attempts, full_access, limited_access)
        select day, app, platform, os_major, app_version, permission, flow,
               coalesce(sum(n) filter (where picker_opened and not permission_attempt), 0),
               coalesce(sum(n) filter (where picker_opened and not permission_attempt and picker_completed), 0),
               coalesce(sum(n) filter (where permission_attempt), 0), coalesce(sum(n) filter (where permission_attempt and outcome = 'granted'), 0),
               coalesce(sum(n) filter (where permission_attempt and outcome = 'limited'), 0)
          from states where permission_attempt or picker_opened
         group by 1, 2, 3, 4, 5, 6, 7
        returning d.*
    ), picker as (
        insert into projection.picker_daily
               (day, app, platform, os_major, app_version, flow,
                picker_attempts, picker_completed, permission_attempts, full_access, limited_access)
        select p.day, p.app, p.platform, p.os_major, p.app_version, p.flow, sum(p.picker_attempts), sum(p.picker_completed),
               sum(p.permission_attempts), sum(p.full_access), sum(p.limited_access)
          from picker_by_dimension p
         group by 1, 2, 3, 4, 5, 6
    )
    select coalesce(sum(n), 0) into n_attempts from states;
    return n_attempts;
end;
$$;

-- Steps 3 and 4 into the staging tables, for the build of this horizon. Runs in a transaction of
-- its own (on the projector's second connection), alongside build_attempts.
create function projection.stage_install_tables(horizon xid8)
returns void
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
set jit = off
set work_mem = '32MB'
set hash_mem_multiplier = 1
as $$
begin
    perform projection.check_build_horizon(horizon, false);
    truncate projection.staged_build, projection.staged_permission_state, projection.staged_events_daily,
             projection.staged_stream_clock, projection.staged_intake_minutely, projection.staged_intake_hourly;

    -- 3. Current permission state per (app, install, permission): the latest outcome or observed
    --    status; notDetermined while there is none.
    insert into projection.staged_permission_state (app, stream_key, permission, state, since, state_pos)
    select distinct on (s.stream_key, s.permission collate "C")
           s.app, s.stream_key, s.permission, coalesce(s.state, 'notDetermined'),
           case when s.state is not null then s.occurred_at end,
           case when s.state is not null then s.position end
      from (select e.app, e.stream_key, e.permission, e.occurred_at, e.position,
                   case when e.type = 'permission.statusObserved' then e.payload->'attributes'->>'status'
                        when e.type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted')
                        then substr(e.type, 12) end as state
              from audit.events e
             where e.transaction_id < horizon and e.permission is not null
            offset 0) as s
     order by s.stream_key, s.permission collate "C", s.state is not null desc, s.occurred_at desc, s.position desc;

    -- 4. Events per day and the late ones (an event of the same install that occurred after it
    --    is earlier in the log), each install's clock, and the events per minute and hour of
    --    recorded_at: one sort per install for the late test, and one pass of grouping sets
    --    over its rows for the three groupings.
    with grouped as materialized (
        select case grouping(a.day, a.stream_key, a.minute) when 3 then 'day' when 5 then 'install' else 'minute' end as by,
               a.day, a.app, a.platform, a.stream_key, a.minute,
               count(*) as n, count(*) filter (where a.late) as n_late, max(a.occurred_at) as latest_at
          from (select e.stream_key, e.occurred_at, (e.occurred_at at time zone 'UTC')::date as day, e.app, e.platform,
                       date_bin('1 minute', e.recorded_at, timestamptz '2000-01-01 00:00:00+00') as minute,
                       e.occurred_at < max(e.occurred_at) over (partition by e.stream_key order by e.position
                                                                 rows between unbounded preceding and 1 preceding) as late
                  from audit.events e
                 where e.transaction_id < horizon) as a
         group by grouping sets ((a.day, a.app, a.platform), (a.stream_key), (a.minute, a.app, a.platform))
    ), daily as (
        insert into projection.staged_events_daily (day, app, platform, events, late_events)
        select day, app, platform, n, n_late from grouped where by = 'day'
    ), clock as (
        insert into projection.staged_stream_clock (stream_key, latest_at)
        select stream_key, latest_at from grouped where by = 'install'
    ), by_minute as (
        insert into projection.staged_intake_minutely (minute, app, platform, events)
        select minute, app, platform, n from grouped where by = 'minute'
    )
    insert into projection.staged_intake_hourly (hour, app, platform, events)
    select date_bin('1 hour', minute, timestamptz '2000-01-01 00:00:00+00'), app, platform, sum(n)
      from grouped
     where by = 'minute'
     group by 1, 2, 3;

    insert into projection.staged_build (horizon) values (stage_install_tables.horizon);
end;
$$;

-- The staged tables into the projection, and the checkpoint after the last event below the
-- horizon; in the transaction that ran build_attempts.
create function projection.finish_build(horizon xid8)
returns table (events bigint, transaction_id xid8, "position" bigint)
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    cp record;
    n_events bigint;
begin
    perform projection.check_build_horizon(horizon, true);
    if not exists (select from projection.staged_build s where s.horizon = finish_build.horizon) then
        raise exception 'no install tables staged for build horizon %', horizon
              using errcode = '55000', hint = 'run projection.stage_install_tables(horizon) first; its transaction must have committed';
    end if;
    insert into projection.permission_state (app, stream_key, permission, state, since, state_pos)
    select s.app, s.stream_key, s.permission, s.state, s.since, s.state_pos from projection.staged_permission_state s;
    insert into projection.events_daily (day, app, platform, events, late_events)
    select s.day, s.app, s.platform, s.events, s.late_events from projection.staged_events_daily s;
    insert into projection.stream_clock (stream_key, latest_at)
    select s.stream_key, s.latest_at from projection.staged_stream_clock s;
    insert into projection.intake_minutely (minute, app, platform, events)
    select s.minute, s.app, s.platform, s.events from projection.staged_intake_minutely s;
    insert into projection.intake_hourly (hour, app, platform, events)
    select s.hour, s.app, s.platform, s.events from projection.staged_intake_hourly s;
    truncate projection.staged_build, projection.staged_permission_state, projection.staged_events_daily,
             projection.staged_stream_clock, projection.staged_intake_minutely, projection.staged_intake_hourly;

    -- 5. The checkpoint: the last of those events in committed order.
    select e.transaction_id, e.position into cp
      from audit.events e
     where e.transaction_id < horizon
     order by e.transaction_id desc, e.position desc
     limit 1;
    if not found then
        return query select 0::bigint, '0'::xid8, 0::bigint;
        return;
    end if;
    select coalesce(sum(d.events), 0) into n_events from projection.events_daily d;
    update projection.checkpoint c
       set transaction_id = cp.transaction_id, position = cp.position, events_projected = n_events, updated_at = now()
     where c.name = 'analytics';
    return query select n_events, cp.transaction_id, cp.position;
end;
$$;

-- The whole build on one connection, as before. Replacing the function drops the work_mem,
-- hash_mem_multiplier and jit settings of 022-025 with its old body: the parts carry their own.
create or replace function projection.build_from_log()
returns table (events bigint, attempts bigint, transaction_id xid8, "position" bigint)
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    horizon xid8 := projection.build_horizon();
    n_attempts bigint;
begin
    if horizon is null then
        return query select 0::bigint, 0::bigint, c.transaction_id, c.position
                       from projection.checkpoint c where c.name = 'analytics';
        return;
    end if;
    perform projection.stage_install_tables(horizon);
    n_attempts := projection.build_attempts(horizon);
    return query select f.events, n_attempts, f.transaction_id, f.position from projection.finish_build(horizon) f;
end;
$$;

alter table projection.staged_build owner to permaudit_owner;
alter table projection.staged_permission_state owner to permaudit_owner;
alter table projection.staged_events_daily owner to permaudit_owner;
alter table projection.staged_stream_clock owner to permaudit_owner;
alter table projection.staged_intake_minutely owner to permaudit_owner;
alter table projection.staged_intake_hourly owner to permaudit_owner;
alter function projection.build_horizon() owner to permaudit_owner;
alter function projection.check_build_horizon(xid8, boolean) owner to permaudit_owner;
alter function projection.build_attempts(xid8) owner to permaudit_owner;
alter function projection.stage_install_tables(xid8) owner to permaudit_owner;
alter function projection.finish_build(xid8) owner to permaudit_owner;
revoke execute on function projection.build_horizon(), projection.check_build_horizon(xid8, boolean),
       projection.build_attempts(xid8), projection.stage_install_tables(xid8), projection.finish_build(xid8) from public;
grant execute on function projection.build_horizon(), projection.build_attempts(xid8),
      projection.stage_install_tables(xid8), projection.finish_build(xid8) to permaudit_projector;
