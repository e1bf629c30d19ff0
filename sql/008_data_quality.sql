-- 008: data quality, and the finer groupings that reports and dashboards filter by.
--
-- * audit.intake_anomalies counts what reached the write path but was not appended: duplicates
--   (recorded by audit.append_events) and rejected events (recorded by the client that refused
--   them, through audit.record_rejected), per UTC day of occurredAt, app and platform where known.
-- * projection.events_daily counts events per day and the late ones (delivered out of order).
-- * The experiment arms gain platform, the picker counts gain os_major and app_version; the
--   contract's views keep their rows (one per the documented grouping) and new *_detail_daily
--   views expose the finer grain.
--
-- The projection is reset here: the next `permaudit project` recomputes it from the log.

select projection.reset();

-- 1. What the write path saw but did not append.
create table audit.intake_anomalies (
    id          bigint generated always as identity primary key,
    recorded_at timestamptz not null default now(),
    day         date,        -- UTC day of the events' occurredAt, NULL when unknown
    app         text,        -- NULL when the refused event had no usable app
    platform    text,
    duplicates  integer not null default 0 check (duplicates >= 0),
    rejected    integer not null default 0 check (rejected >= 0)
);
comment on table audit.intake_anomalies is
    'Counts of events that reached the write path and were not appended: duplicates and rejected events.';
create index intake_anomalies_day on audit.intake_anomalies (day);

-- The 003 write path keeps its body under a new name; audit.append_events wraps it and records
-- the duplicates of each call (in the caller's transaction: a rolled-back call records nothing).
alter function audit.append_events(jsonb, bigint) rename to store_events;
comment on function audit.store_events(jsonb, bigint) is
    'The body of the write path (see audit.append_events); not called directly.';

create function audit.append_events(events jsonb, expected_version bigint default null)
returns table (event_id uuid, "position" bigint, status text)
language plpgsql
as $$
begin
    return query
    with results as materialized (
        select s.event_id, s.position, s.status, s.idx
          from audit.store_events(events, expected_version) with ordinality as s(event_id, position, status, idx)
    ), recorded as (
        insert into audit.intake_anomalies (day, app, platform, duplicates)
        select ((x.e->>'occurredAt')::timestamptz at time zone 'UTC')::date, x.e->>'app', x.e->>'platform', count(*)
          from results r
          join jsonb_array_elements(events) with ordinality as x(e, idx) on x.idx = r.idx
         where r.status = 'duplicate'
         group by 1, 2, 3
    )
    select r.event_id, r.position, r.status from results r order by r.idx;
end;
$$;
comment on function audit.append_events(jsonb, bigint) is
    'The write path: validates, deduplicates by eventId and appends a JSON array of wire-format events.';

-- Clients that refuse events before the write path (the CLI's --rejects mode, the collector)
-- record how many, so reports and dashboards can show them.
create function audit.record_rejected(day date, app text, platform text, rejected integer)
returns void
language sql
as $$
    insert into audit.intake_anomalies (day, app, platform, rejected)
    select day, app, platform, rejected where rejected > 0;
$$;
comment on function audit.record_rejected(date, text, text, integer) is
    'Records that a client refused this many events (of this occurredAt day, app and platform, where known).';

-- 2. Finer groupings.
alter table projection.experiments_daily add column platform text not null;
alter table projection.experiments_daily drop constraint experiments_daily_day_app_experiment_variant_key;
alter table projection.experiments_daily add unique (day, app, platform, experiment, variant);

alter table projection.picker_daily add column os_major integer not null;
alter table projection.picker_daily add column app_version text not null;
alter table projection.picker_daily drop constraint picker_daily_day_app_platform_flow_key;
alter table projection.picker_daily add unique nulls not distinct (day, app, platform, os_major, app_version, flow);

-- 3. Events per day and late events.
create table projection.events_daily (
    day         date not null,
    app         text not null,
    platform    text not null,
    events      bigint not null default 0,
    late_events bigint not null default 0,
    primary key (day, app, platform)
);

-- The latest occurred_at seen per install, to tell a late event.
create table projection.stream_clock (
    stream_key bigint primary key,
    latest_at  timestamptz not null
);

-- 4. The projector's unit of work, as in 006 plus the new groupings and step 6.
create or replace function projection.apply_batch(batch_size integer default 20000)
returns table (events integer, attempts integer, transaction_id xid8, "position" bigint)
language plpgsql
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
    drop table if exists pg_temp.batch, pg_temp.touched, pg_temp.old_states, pg_temp.new_states, pg_temp.moves,
                         pg_temp.arrivals;

    create temporary table batch on commit drop as
    select e.position, e.transaction_id, e.stream_key, e.type, e.occurred_at, e.app, e.platform,
           e.os_major, e.app_version, e.attempt, e.permission, e.flow,
           e.payload->'experiments' as experiments, e.payload->'attributes' as attributes
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

    -- 1. What this batch says about each attempt it touches. The input is sorted once by
    --    (occurred_at, position) within each attempt and the aggregates collect in that order
    --    (no per-aggregate sort): element [1] is the earliest, the last element the latest.
    create temporary table touched on commit drop as
    select app, attempt, stream_keys[1] as stream_key, first_ats[1] as first_at, positions[1] as first_pos,
           platforms[1] as platform, os_majors[1] as os_major, app_versions[1] as app_version,
           permissions[1] as permission, permission_ats[1] as permission_at, permission_poss[1] as permission_pos,
           flows[1] as flow, flow_ats[1] as flow_at, flow_poss[1] as flow_pos,
           experimentss[1] as experiments, experiments_ats[1] as experiments_at, experiments_poss[1] as experiments_pos,
           outcomes[cardinality(outcomes)] as outcome, outcome_ats[cardinality(outcome_ats)] as outcome_at,
           outcome_poss[cardinality(outcome_poss)] as outcome_pos,
           coalesce(outcome_permanents[cardinality(outcome_permanents)], false) as outcome_permanent,
           prompted_dialog, prompted_any, pre_shown, pre_accepted, pre_declined, picker_opened, picker_completed
      from (
        select b.app, b.attempt,
               array_agg(b.stream_key) as stream_keys, array_agg(b.occurred_at) as first_ats, array_agg(b.position) as positions,
               array_agg(b.platform) as platforms, array_agg(b.os_major) as os_majors, array_agg(b.app_version) as app_versions,
               array_agg(b.permission) filter (where b.permission is not null) as permissions,
               array_agg(b.occurred_at) filter (where b.permission is not null) as permission_ats,
               array_agg(b.position) filter (where b.permission is not null) as permission_poss,
               array_agg(b.flow) filter (where b.flow is not null) as flows,
               array_agg(b.occurred_at) filter (where b.flow is not null) as flow_ats,
               array_agg(b.position) filter (where b.flow is not null) as flow_poss,
               array_agg(b.experiments) filter (where b.experiments is not null) as experimentss,
               array_agg(b.occurred_at) filter (where b.experiments is not null) as experiments_ats,
               array_agg(b.position) filter (where b.experiments is not null) as experiments_poss,
               array_agg(substr(b.type, 12)) filter (where b.is_outcome) as outcomes,
               array_agg(b.occurred_at) filter (where b.is_outcome) as outcome_ats,
               array_agg(b.position) filter (where b.is_outcome) as outcome_poss,
               array_agg(b.type = 'permission.denied' and coalesce((b.attributes->>'permanent')::boolean, false))
                   filter (where b.is_outcome) as outcome_permanents,
               bool_or(b.type = 'permission.prompted' and coalesce((b.attributes->>'dialogShown')::boolean, true)) as prompted_dialog,
               bool_or(b.type = 'permission.prompted') as prompted_any,
               bool_or(b.type = 'prePermission.shown') as pre_shown,
               bool_or(b.type = 'prePermission.accepted') as pre_accepted,
               bool_or(b.type = 'prePermission.declined') as pre_declined,
               bool_or(b.type = 'picker.opened') as picker_opened,
               bool_or(b.type = 'picker.completed') as picker_completed
          from (select *, type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted') as is_outcome
                  from batch where attempt is not null
                 order by app, attempt, occurred_at, position) as b
         group by b.app, b.attempt
      ) as agg;
    get diagnostics n_attempts = row_count;

    -- 2. Their states before (old) and after (new) this batch.
    create temporary table old_states on commit drop as
    select a.* from projection.attempts a join touched t on t.app = a.app and t.attempt = a.attempt;

    create temporary table new_states on commit drop as
    select t.app, t.attempt,
           case when o.attempt is null or (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.stream_key else o.stream_key end as stream_key,
           case when o.attempt is null or (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.first_at else o.first_at end as first_at,
           case when o.attempt is null or (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.first_pos else o.first_pos end as first_pos,
           case when o.attempt is null or (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.platform else o.platform end as platform,
           case when o.attempt is null or (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.os_major else o.os_major end as os_major,
           case when o.attempt is null or (t.first_at, t.first_pos) < (o.first_at, o.first_pos) then t.app_version else o.app_version end as app_version,
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
           t.picker_completed or coalesce(o.picker_completed, false) as picker_completed
      from touched t
      left join old_states o on o.app = t.app and o.attempt = t.attempt;

    -- 3. Move each touched attempt's contribution: -1 for its old state, +1 for its new one.
    create temporary table moves on commit drop as
    select -1 as sign, s.*, (s.first_at at time zone 'UTC')::date as day,
           s.prompted_any or s.pre_shown as permission_attempt
      from old_states s
    union all
    select 1, s.*, (s.first_at at time zone 'UTC')::date,
           s.prompted_any or s.pre_shown
      from new_states s;

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
           restricted = d.restricted + excluded.restricted;

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
           denied = d.denied + excluded.denied, denied_at_dialog = d.denied_at_dialog + excluded.denied_at_dialog;

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
           denied = d.denied + excluded.denied, denied_at_dialog = d.denied_at_dialog + excluded.denied_at_dialog;

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
           limited_access = d.limited_access + excluded.limited_access;

    -- 4. Store the new attempt states.
    insert into projection.attempts as a
    select * from new_states
    on conflict (app, attempt) do update set
           stream_key = excluded.stream_key, first_at = excluded.first_at, first_pos = excluded.first_pos,
           platform = excluded.platform, os_major = excluded.os_major, app_version = excluded.app_version,
           permission = excluded.permission, permission_at = excluded.permission_at, permission_pos = excluded.permission_pos,
           flow = excluded.flow, flow_at = excluded.flow_at, flow_pos = excluded.flow_pos,
           experiments = excluded.experiments, experiments_at = excluded.experiments_at, experiments_pos = excluded.experiments_pos,
           outcome = excluded.outcome, outcome_at = excluded.outcome_at, outcome_pos = excluded.outcome_pos,
           outcome_permanent = excluded.outcome_permanent, prompted_dialog = excluded.prompted_dialog,
           prompted_any = excluded.prompted_any, pre_shown = excluded.pre_shown, pre_accepted = excluded.pre_accepted,
           pre_declined = excluded.pre_declined, picker_opened = excluded.picker_opened,
           picker_completed = excluded.picker_completed;

    -- 5. Current permission state per (app, install, permission): the latest outcome or observed
    --    status by (occurred_at, position); notDetermined while there is none.
    insert into projection.permission_state as p (app, stream_key, permission, state, since, state_pos)
    select app, stream_key, permission, coalesce(states[cardinality(states)], 'notDetermined'),
           sinces[cardinality(sinces)], state_poss[cardinality(state_poss)]
      from (
        select b.app, b.stream_key, b.permission,
               array_agg(case when b.type = 'permission.statusObserved' then b.attributes->>'status' else substr(b.type, 12) end)
                   filter (where b.is_state) as states,
               array_agg(b.occurred_at) filter (where b.is_state) as sinces,
               array_agg(b.position) filter (where b.is_state) as state_poss
          from (select *, type in ('permission.granted', 'permission.limited', 'permission.denied', 'permission.restricted',
                                   'permission.statusObserved') as is_state
                  from batch where permission is not null
                 order by app, stream_key, permission, occurred_at, position) as b
         group by b.app, b.stream_key, b.permission
      ) as agg
    on conflict (app, stream_key, permission) do update set
           state = excluded.state, since = excluded.since, state_pos = excluded.state_pos
     where excluded.since is not null
       and (p.since is null or (excluded.since, excluded.state_pos) > (p.since, p.state_pos));

    -- 6. Events per day, and the late ones: an event is late when an event of the same install
    --    that occurred after it is earlier in the log (it was delivered out of order).
    create temporary table arrivals on commit drop as
    select (b.occurred_at at time zone 'UTC')::date as day, b.app, b.platform, b.stream_key, b.occurred_at,
           coalesce(b.occurred_at < greatest(c.latest_at,
                                             max(b.occurred_at) over (partition by b.stream_key order by b.position
                                                                      rows between unbounded preceding and 1 preceding)),
                    false) as late
      from batch b
      left join projection.stream_clock c on c.stream_key = b.stream_key;

    insert into projection.events_daily as d (day, app, platform, events, late_events)
    select day, app, platform, count(*), count(*) filter (where late)
      from arrivals
     group by 1, 2, 3
    on conflict (day, app, platform) do update set
           events = d.events + excluded.events, late_events = d.late_events + excluded.late_events;

    insert into projection.stream_clock as c (stream_key, latest_at)
    select stream_key, max(occurred_at) from arrivals group by stream_key
    on conflict (stream_key) do update set latest_at = greatest(c.latest_at, excluded.latest_at);

    -- 7. Advance the checkpoint.
    select b.transaction_id, b.position into cp from batch b order by b.transaction_id desc, b.position desc limit 1;
    update projection.checkpoint c
       set transaction_id = cp.transaction_id, position = cp.position,
           events_projected = c.events_projected + n_events, updated_at = now()
     where c.name = 'analytics';

    return query select n_events, n_attempts, cp.transaction_id, cp.position;
end;
$$;

create or replace function projection.reset()
returns void
language sql
as $$
    delete from projection.outcomes_daily;
    delete from projection.priming_daily;
    delete from projection.experiments_daily;
    delete from projection.picker_daily;
    delete from projection.events_daily;
    delete from projection.stream_clock;
    delete from projection.permission_state;
    delete from projection.attempts;
    update projection.checkpoint set transaction_id = '0', position = 0, events_projected = 0, updated_at = now();
$$;

-- 5. Views. The contract's views keep one row per their documented grouping.
create or replace view analytics.experiment_arms_daily as
select day, app, experiment, variant,
       sum(attempts)::bigint as attempts, sum(prompted)::bigint as prompted, sum(granted)::bigint as granted,
       sum(limited)::bigint as limited, sum(denied)::bigint as denied, sum(denied_at_dialog)::bigint as denied_at_dialog
  from projection.experiments_daily
 group by day, app, experiment, variant
having sum(attempts) <> 0;

create or replace view analytics.picker_adoption_daily as
select day, app, platform, flow,
       sum(picker_attempts)::bigint as picker_attempts, sum(picker_completed)::bigint as picker_completed,
       sum(permission_attempts)::bigint as permission_attempts, sum(full_access)::bigint as full_access,
       sum(limited_access)::bigint as limited_access
  from projection.picker_daily
 group by day, app, platform, flow
having sum(picker_attempts) <> 0 or sum(permission_attempts) <> 0;

create view analytics.experiment_arms_detail_daily as
select day, app, platform, experiment, variant, attempts, prompted, granted, limited, denied, denied_at_dialog
  from projection.experiments_daily
 where attempts <> 0;
comment on view analytics.experiment_arms_detail_daily is
    'Permission attempts carrying an experiment key, per day, app, platform, experiment and variant.';

create view analytics.picker_adoption_detail_daily as
select day, app, platform, os_major, app_version, flow,
       picker_attempts, picker_completed, permission_attempts, full_access, limited_access
  from projection.picker_daily
 where picker_attempts <> 0 or permission_attempts <> 0;
comment on view analytics.picker_adoption_detail_daily is
    'Picker and permission attempts per day, app, platform, OS major, app version and flow.';

create view analytics.events_daily as
select day, app, platform, events, late_events
  from projection.events_daily;
comment on view analytics.events_daily is
    'Events in the log per UTC day of occurredAt, app and platform; late_events arrived after an event of the same install that occurred later.';

create view analytics.intake_anomalies_daily as
select day, app, platform, sum(duplicates)::bigint as duplicates, sum(rejected)::bigint as rejected
  from audit.intake_anomalies
 group by day, app, platform;
comment on view analytics.intake_anomalies_daily is
    'Events that reached the write path and were not appended: duplicates and rejected, per occurredAt day, app and platform (NULL where unknown).';

grant select on all tables in schema analytics to permaudit_analyst;
