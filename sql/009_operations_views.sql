-- 009: operations views for the log-health dashboard, readable by permaudit_analyst.
--
-- * projection.intake_minutely and projection.intake_hourly count events per minute and per hour
--   of recorded_at (the server's time of the inserting transaction), app and platform. The
--   projector maintains them in the transaction of each batch, from the batch's range of the
--   committed-order index, so they cost a range scan of what the batch read anyway; a rebuild
--   recomputes them with the rest. Hours keep long dashboard ranges cheap (a month of minutes is
--   43,200 rows per app and platform, a month of hours 720).
-- * analytics.log_intake_minutely, analytics.log_intake_hourly: those counts plus the events the
--   projector has not reached yet, counted from the log (cheap while the projector keeps up;
--   proportional to its lag otherwise).
-- * analytics.intake_anomalies_minutely: duplicates and rejections per minute of recorded_at.
-- * analytics.projector_lag: one row, how far the projector is behind the log.
--
-- Minutes are date_bin('1 minute', recorded_at, '2000-01-01 00:00+00'): immutable, so the session
-- time zone cannot change them and an index can hold them.

create table projection.intake_minutely (
    minute   timestamptz not null,
    app      text not null,
    platform text not null,
    events   bigint not null check (events > 0),
    primary key (minute, app, platform)
);
comment on table projection.intake_minutely is
    'Events in the log per minute of recorded_at, app and platform, up to the projection checkpoint.';

create table projection.intake_hourly (like projection.intake_minutely including all);
alter table projection.intake_hourly rename column minute to hour;
comment on table projection.intake_hourly is
    'Events in the log per hour of recorded_at, app and platform, up to the projection checkpoint.';

-- The events projected before this migration.
insert into projection.intake_minutely (minute, app, platform, events)
select date_bin('1 minute', e.recorded_at, timestamptz '2000-01-01 00:00:00+00'), e.app, e.platform, count(*)
  from audit.events e
  join projection.checkpoint c on c.name = 'analytics'
 where (e.transaction_id, e.position) <= (c.transaction_id, c.position)
 group by 1, 2, 3;
insert into projection.intake_hourly (hour, app, platform, events)
select date_bin('1 hour', minute, timestamptz '2000-01-01 00:00:00+00'), app, platform, sum(events)
  from projection.intake_minutely
 group by 1, 2, 3;

-- 1. The projector's unit of work: the 008 body under a new name, and the minute counts of the
--    same events (everything after the old checkpoint up to the new one in committed order: the
--    rows the batch read, and no others, since all of them were below the oldest running
--    transaction when it read them).
alter function projection.apply_batch(integer) rename to apply_counts;
comment on function projection.apply_counts(integer) is
    'The body of projection.apply_batch (the count tables and the checkpoint); not called directly.';

create function projection.apply_batch(batch_size integer default 20000)
returns table (events integer, attempts integer, transaction_id xid8, "position" bigint)
language plpgsql
as $$
declare
    start_cp record;
    done record;
begin
    select c.transaction_id, c.position into start_cp
      from projection.checkpoint c where c.name = 'analytics' for update;
    select * into done from projection.apply_counts(batch_size);
    if done.events > 0 then
        with minutes as (
            select date_bin('1 minute', e.recorded_at, timestamptz '2000-01-01 00:00:00+00') as minute, e.app, e.platform,
                   count(*) as n
              from audit.events e
             where (e.transaction_id, e.position) > (start_cp.transaction_id, start_cp.position)
               and (e.transaction_id, e.position) <= (done.transaction_id, done.position)
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
    end if;
    return query select done.events, done.attempts, done.transaction_id, done.position;
end;
$$;
comment on function projection.apply_batch(integer) is
    'One incremental step of the projector: count tables, minute counts and checkpoint, in the caller''s transaction.';

alter function projection.reset() rename to reset_counts;
create function projection.reset()
returns void
language sql
as $$
    select projection.reset_counts();
    delete from projection.intake_minutely;
    delete from projection.intake_hourly;
$$;

-- 2. The views.

-- The events after the checkpoint, read through the committed-order index. A function, so that
-- the checkpoint is a value when the query is planned: in a join the planner cannot tell how few
-- rows follow it and reads the whole log. Security definer because the analyst reaches it only
-- through the views below and may not read audit.events itself.
create function projection.unprojected_events()
returns table (recorded_at timestamptz, app text, platform text)
language plpgsql stable security definer
set search_path = pg_catalog
as $$
declare
    cp record;
begin
    select c.transaction_id, c.position into cp from projection.checkpoint c where c.name = 'analytics';
    return query execute
        'select e.recorded_at, e.app, e.platform from audit.events e where (e.transaction_id, e.position) > ($1, $2)'
        using cp.transaction_id, cp.position;
end;
$$;
revoke all on function projection.unprojected_events() from public;
grant execute on function projection.unprojected_events() to permaudit_analyst;

create view analytics.log_intake_minutely as
select minute, app, platform, sum(events)::bigint as events
  from (select m.minute, m.app, m.platform, m.events
          from projection.intake_minutely m
        union all
        select date_bin('1 minute', u.recorded_at, timestamptz '2000-01-01 00:00:00+00'), u.app, u.platform, 1
          from projection.unprojected_events() as u) as counted
 group by minute, app, platform;
comment on view analytics.log_intake_minutely is
    'Events stored in the log per minute of recorded_at (server time), app and platform; includes events not projected yet.';

create view analytics.log_intake_hourly as
select hour, app, platform, sum(events)::bigint as events
  from (select h.hour, h.app, h.platform, h.events
          from projection.intake_hourly h
        union all
        select date_bin('1 hour', u.recorded_at, timestamptz '2000-01-01 00:00:00+00'), u.app, u.platform, 1
          from projection.unprojected_events() as u) as counted
 group by hour, app, platform;
comment on view analytics.log_intake_hourly is
    'Events stored in the log per hour of recorded_at (server time), app and platform; includes events not projected yet.';

create index intake_anomalies_minute
    on audit.intake_anomalies (date_bin('1 minute', recorded_at, timestamptz '2000-01-01 00:00:00+00'));

create view analytics.intake_anomalies_minutely as
select date_bin('1 minute', recorded_at, timestamptz '2000-01-01 00:00:00+00') as minute, app, platform,
       sum(duplicates)::bigint as duplicates, sum(rejected)::bigint as rejected
  from audit.intake_anomalies
 group by 1, 2, 3;
comment on view analytics.intake_anomalies_minutely is
    'Duplicates and rejected events per minute of recorded_at (when the write path or the client recorded them), app and platform (NULL where unknown).';

create view analytics.projector_lag as
select c.updated_at as checkpoint_updated_at, c.events_projected, behind.events as events_behind,
       behind.oldest_recorded_at as oldest_unprojected_at,
       coalesce(extract(epoch from now() - behind.oldest_recorded_at), 0)::float8 as lag_seconds
  from projection.checkpoint c
 cross join (select count(*) as events, min(u.recorded_at) as oldest_recorded_at
               from projection.unprojected_events() as u) as behind
 where c.name = 'analytics';
comment on view analytics.projector_lag is
    'One row: when the projector last advanced, events projected, events stored but not projected yet and the age in seconds of the oldest of them (0 when caught up).';

-- 3. The contract's statistics (domain section 4) for dashboards and analysts, the same formulas
--    as the report's Swift code. Immutable and NULL where undefined (no trials, no variance).
create function analytics.wilson_low(successes numeric, trials numeric)
returns float8
language sql immutable
as $$
    select greatest(0, (p + z * z / (2 * n) - z * sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n))
      from (select successes::float8 / trials as p, trials::float8 as n, 1.959964::float8 as z where trials > 0) as t;
$$;
comment on function analytics.wilson_low(numeric, numeric) is 'Lower end of the Wilson 95% interval of successes / trials.';

create function analytics.wilson_high(successes numeric, trials numeric)
returns float8
language sql immutable
as $$
    select least(1, (p + z * z / (2 * n) + z * sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n))
      from (select successes::float8 / trials as p, trials::float8 as n, 1.959964::float8 as z where trials > 0) as t;
$$;
comment on function analytics.wilson_high(numeric, numeric) is 'Upper end of the Wilson 95% interval of successes / trials.';

-- Two-sided p-value of the pooled two-proportion z-test: 2(1 - Phi(|z|)) = erfc(|z| / sqrt 2),
-- with erfc from Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).
create function analytics.pooled_p_value(successes numeric, trials numeric, baseline_successes numeric, baseline_trials numeric)
returns float8
language sql immutable
as $$
    select t * exp(-x * x) * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
      from (select x, 1 / (1 + 0.3275911 * x) as t
              from (select abs(p1 - p0) / sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n0)) / sqrt(2::float8) as x
                      from (select successes::float8 / trials as p1, baseline_successes::float8 / baseline_trials as p0,
                                   trials::float8 as n1, baseline_trials::float8 as n0,
                                   (successes + baseline_successes)::float8 / (trials + baseline_trials) as pooled
                             where trials > 0 and baseline_trials > 0) as r
                     where pooled > 0 and pooled < 1) as s) as u;
$$;
comment on function analytics.pooled_p_value(numeric, numeric, numeric, numeric) is
    'Two-sided p-value of the pooled two-proportion z-test of successes / trials against the baseline.';

grant select on all tables in schema analytics to permaudit_analyst;
grant execute on all functions in schema analytics to permaudit_analyst;
