-- 040: plans that hold while one transaction grows the log.
--
-- A reviewer re-ran an all-or-nothing `permaudit ingest` after killing one mid-way, and it went
-- from seconds to about 1,000 events per 10 s (stopped after 12 minutes). The planner reads a table's size from its statistics
-- (pg_class.reltuples and relpages) and scales them to the table's current pages. The killed
-- ingest left dead rows that autovacuum removed: audit.events then had relpages > 0 and
-- reltuples = 0, which the planner takes as "no rows on any page", however many rows the new
-- ingest's one transaction adds. A database vacuumed while empty (reltuples = 0, relpages = 0)
-- had part of the problem too. A fresh database never analysed (reltuples = -1) was planned
-- from its pages and was fine. Two statements then chose plans whose cost grew with the rows
-- appended so far:
--
-- 1. The check on new links (035, audit.guard_link_insert) has no parameters, so PL/pgSQL
--    plans it once per session and keeps the plan. Planned while the log was empty, it scanned
--    the whole log once for every new install. 94,375 events took 32 s instead of 4 s on a
--    database vacuumed while empty. It now plans with sequential scans disabled: the probe of
--    the (stream_key, stream_version) index is its only sensible plan.
-- 2. In audit.append_events, step 4 joined the batch's events to the link table. Believing the
--    link table empty, the planner put it on the outer side of a nested loop and read the
--    batch again for every link row. With the batch's duplicate probe inside, that was 1.3
--    million index probes per call of 1000 events after 1,345 links. The join is now a
--    lateral probe of the link table's (app, subject) key for each event, so it cannot be
--    turned around. Otherwise the function is 039's.
--
-- 94,375 events (`permaudit simulate --seed 21 --subjects 12000`, all-or-nothing ingest), 2 cores:
-- on a fresh database 3.4-4.0 s before and 3.7-3.9 s after; vacuumed while empty, 32.1-32.8 s
-- before and 3.9 s after; re-run after an ingest killed at 2.3 s and a vacuum, over 200 s (stopped) before
-- and 4.0 s after. The tests AppendTests.testOneTransactionGrowingALog* fail without either part.

alter function audit.guard_link_insert() set enable_seqscan = off;

create or replace function audit.append_events(events jsonb, expected_version bigint default null)
returns table (event_id uuid, "position" bigint, status text)
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    problem      record;
    apps         text[];
    subjects     text[];
    version      bigint;
    ids          uuid[];
    positions    bigint[];
    statuses     text[];
    conflict_idx integer;
    e            jsonb;
    problem_text text;
    key          bigint;
    pos          bigint;
    stored       boolean;
    locked       bigint;
    saved_lock_timeout text;
begin
    if events is null or jsonb_typeof(events) <> 'array' then
        raise exception using errcode = 'PA001', message = 'events: must be a JSON array of events';
    end if;

    -- One event (permaudit append, most library calls): the same steps in fewer statements. With
    -- a single stream to lock there is no lock order to keep.
    if jsonb_array_length(events) = 1 then
        e := events->0;
        if not audit.event_is_valid(e) then
            problem_text := audit.event_problem(e);
            if problem_text is not null then
                raise exception using errcode = 'PA001', message = 'events[0].' || problem_text, detail = 'index=0';
            end if;
        end if;
        stored := audit.stored_copy(e);
        if stored is null then
            select s.stream_key into key
              from audit.subject_streams s where s.app = e->>'app' and s.subject = e->>'subject'
               for no key update;
            if key is null then
                insert into audit.subject_streams as s (app, subject) values (e->>'app', e->>'subject')
                on conflict (app, subject) do update set app = s.app  -- created meanwhile: lock it
                returning s.stream_key into key;
            end if;
            -- Under the lock (a new snapshot): the stream's last version, -1 for a new stream.
            select coalesce(max(l.stream_version), -1) into version from audit.events l where l.stream_key = key;
            if expected_version is not null and version <> expected_version then
                -- A stream that moved on may have moved on by this very event (a retry racing
                -- its first attempt): that is a duplicate, not a wrong version.
                stored := audit.stored_copy(e);
                if stored is null then
                    raise exception using errcode = 'PA003',
                        message = format('wrong expected version: expected %s, the stream is at %s', expected_version, version);
                end if;
            else
                insert into audit.events as l (event_id, stream_key, stream_version, type, occurred_at, app, platform,
                                               os_major, app_version, attempt, permission, flow, payload)
                values ((e->>'eventId')::uuid, key, version + 1, e->>'type', audit.occurred_at(e->>'occurredAt'),
                        e->>'app', e->>'platform', split_part(e->>'osVersion', '.', 1)::integer, e->>'appVersion',
                        (e->>'attempt')::uuid, e->>'permission', e->>'flow', e - 'subject')
                on conflict on constraint events_event_id_key do nothing
                returning l.position into pos;
                if pos is not null then
                    perform audit.notify_appended();
                    return query select (e->>'eventId')::uuid, pos, 'appended'::text;
                    return;
                end if;
                -- A concurrent caller stored this id first: compare with what it stored.
                stored := audit.stored_copy(e);
            end if;
        end if;
        if not stored then
            raise exception using errcode = 'PA002',
                message = 'events[0].eventId: an event with this id was already stored with different content',
                detail = 'index=0';
        end if;
        insert into audit.intake_anomalies (day, app, platform, duplicates)
        values ((audit.occurred_at(e->>'occurredAt') at time zone 'UTC')::date, e->>'app', e->>'platform', 1);
        return query select (e->>'eventId')::uuid, null::bigint, 'duplicate'::text;
        return;
    end if;

    -- 1. Every event follows the contract, or nothing is stored. The rule walk names the first
    --    rule broken; it runs only for the events that the one-expression check does not clear.
    select v.idx, v.problem into problem
      from (select i - 1 as idx,
                   case when not audit.event_is_valid(x.e) then audit.event_problem(x.e) end as problem
              from jsonb_array_elements(events) with ordinality as x(e, i)) as v
     where v.problem is not null
     order by v.idx
     limit 1;
    if found then
        raise exception using errcode = 'PA001',
            message = format('events[%s].%s', problem.idx, problem.problem),
            detail = format('index=%s', problem.idx);
    end if;

    -- 2. The streams of the events not yet in the log, in (app, subject) order: created where
    --    new, then locked. A concurrent caller with an overlapping batch waits here, per stream.
    select array_agg(w.app order by w.app, w.subject), array_agg(w.subject order by w.app, w.subject)
      into apps, subjects
      from (select distinct x.e->>'app' as app, x.e->>'subject' as subject
              from jsonb_array_elements(events) as x(e)
             where (select l.position from audit.events l where l.event_id = (x.e->>'eventId')::uuid) is null) as w;

    insert into audit.subject_streams (app, subject)
    select w.app, w.subject from unnest(apps, subjects) with ordinality as w(app, subject, n) order by w.n
    on conflict (app, subject) do nothing;

    select count(*) into locked
      from unnest(apps, subjects) with ordinality as w(app, subject, n)
      join lateral (select from audit.subject_streams l
                     where l.app = w.app and l.subject = w.subject
                       for no key update) as s on true;

    -- An install erased while this call waited for its lock has no link left: it starts a new
    -- stream, as in the one-event path. This call already holds the installs after it in the
    -- lock order, so it must not wait for a writer that re-created the install meanwhile (that
    -- writer may be waiting for one of them): it waits at most 100 ms, then gives up with a
    -- serialization failure, which the caller runs again. (The block's subtransaction is paid
    -- only here.)
    if locked < cardinality(apps) then
        begin
            saved_lock_timeout := current_setting('lock_timeout');
            perform set_config('lock_timeout', '100ms', true);
            for i in 1 .. cardinality(apps) loop
                insert into audit.subject_streams as s (app, subject) values (apps[i], subjects[i])
                on conflict (app, subject) do update set app = s.app;  -- exists: lock it (no change)
            end loop;
            perform set_config('lock_timeout', saved_lock_timeout, true);
        exception when lock_not_available then
            raise exception using errcode = '40001',
                message = 'an install of this call was erased while the call waited, and another writer holds its new stream: run the call again';
        end;
    end if;

    -- 3. Optimistic concurrency, for a batch of one stream.
    if expected_version is not null then
        if (select count(distinct (x.e->>'app', x.e->>'subject')) from jsonb_array_elements(events) as x(e)) > 1 then
            raise exception using errcode = 'PA001',
                message = 'expected_version: applies only to a batch of one stream (app, subject)';
        end if;
        -- Under the lock (a new snapshot): the stream's last version, -1 for a new stream.
        select coalesce(max(l.stream_version), -1) into version
          from audit.subject_streams s
          join audit.events l on l.stream_key = s.stream_key
         where s.app = apps[1] and s.subject = subjects[1];
        -- A stream that moved on by this very batch (a retry racing its first attempt, which
        -- stored it while this call waited for the lock) is not a wrong version: step 4 finds
        -- every event stored and answers duplicate.
        if cardinality(apps) = 1 and version <> expected_version
           and exists (select from jsonb_array_elements(events) as x(e) where audit.stored_copy(x.e) is null) then
            raise exception using errcode = 'PA003',
                message = format('wrong expected version: expected %s, the stream is at %s',
                                 expected_version, version);
        end if;
    end if;
    -- 4. Under the locks (a new snapshot), append what is new; check that repeats are identical.
    with batch as (
        select (i - 1)::integer as idx, x.e, (x.e->>'eventId')::uuid as id,
               x.e->>'app' as app, x.e->>'subject' as subject
          from jsonb_array_elements(events) with ordinality as x(e, i)
    ), firsts as (
        select distinct on (b.id) b.*
          from batch b
         order by b.id, b.idx
    ), fresh as (
        select f.*
          from firsts f
         where (select l.position from audit.events l where l.event_id = f.id) is null
    ), numbered as (
        -- The streams locked in step 2, read by their unique key, one probe per event (040); each
        -- continues after the last version in the log (read in this statement's snapshot, taken
        -- under the locks).
        select f.*, s.stream_key,
               coalesce(v.last_version, -1) + row_number() over (partition by s.stream_key order by f.idx) as version
          from fresh f
          cross join lateral (select s.stream_key from audit.subject_streams s
                               where s.app = f.app and s.subject = f.subject
                               limit 1) as s  -- the one link; the limit keeps the probe a probe
          left join lateral (select max(l.stream_version) as last_version
                               from audit.events l where l.stream_key = s.stream_key) as v on true
    ), inserted as (
        insert into audit.events as l (event_id, stream_key, stream_version, type, occurred_at, app, platform,
                                       os_major, app_version, attempt, permission, flow, payload)
        select n.id, n.stream_key, n.version, n.e->>'type', audit.occurred_at(n.e->>'occurredAt'), n.app,
               n.e->>'platform', split_part(n.e->>'osVersion', '.', 1)::integer, n.e->>'appVersion',
               (n.e->>'attempt')::uuid, n.e->>'permission', n.e->>'flow', n.e - 'subject'
          from numbered n
         order by n.idx
        on conflict on constraint events_event_id_key do nothing
        returning l.event_id, l.position, l.stream_key, l.stream_version
    ), results as (
        select b.idx, b.id, b.e, i.position,
               case
                   when i.position is not null then 'appended'
                   when b.idx <> f.idx then case when b.e = f.e then 'duplicate' else 'conflict' end
                   when audit.stored_copy(b.e) then 'duplicate'
                   else 'conflict'  -- different content, or a concurrent caller stored it for another install
               end as status
          from batch b
          join firsts f on f.id = b.id
          left join inserted i on i.event_id = b.id and b.idx = f.idx
    ), recorded as (
        insert into audit.intake_anomalies (day, app, platform, duplicates)
        select (audit.occurred_at(r.e->>'occurredAt') at time zone 'UTC')::date, r.e->>'app', r.e->>'platform', count(*)
          from results r
         where r.status = 'duplicate'
         group by 1, 2, 3
    )
    select array_agg(r.id order by r.idx), array_agg(r.position order by r.idx),
           array_agg(r.status order by r.idx), min(r.idx) filter (where r.status = 'conflict')
      into ids, positions, statuses, conflict_idx
      from results r;

    if conflict_idx is not null then
        raise exception using errcode = 'PA002',
            message = format('events[%s].eventId: an event with this id was already stored with different content',
                             conflict_idx),
            detail = format('index=%s', conflict_idx);
    end if;

    if 'appended' = any (statuses) then
        perform audit.notify_appended();
    end if;

    return query select * from unnest(ids, positions, statuses);
end;
$$;
