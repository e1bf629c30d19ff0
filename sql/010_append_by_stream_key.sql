-- 010: the write path's numbering step reads the locked streams by their unique key.
--
-- In 003 the new events were joined to the locked streams through unnest() of arrays; the
-- planner cannot estimate that set and ran it as a nested loop, re-scanning the arrays for every
-- event (about a tenth of a millisecond per event in a batch of 1000 spread over 240 installs).
-- The events are now joined to audit.subject_streams on (app, subject): one index probe each.
-- Nothing else changes; audit.append_events (008) wraps this body.

create or replace function audit.store_events(events jsonb, expected_version bigint default null)
returns table (event_id uuid, "position" bigint, status text)
language plpgsql
as $$
declare
    problem      record;
    versions     bigint[];
    ids          uuid[];
    positions    bigint[];
    statuses     text[];
    conflict_idx integer;
begin
    if events is null or jsonb_typeof(events) <> 'array' then
        raise exception using errcode = 'PA001', message = 'events: must be a JSON array of events';
    end if;

    -- 1. Every event follows the contract, or nothing is stored.
    select v.idx, v.problem into problem
      from (select i - 1 as idx, audit.event_problem(x.e) as problem
              from jsonb_array_elements(events) with ordinality as x(e, i)) as v
     where v.problem is not null
     order by v.idx
     limit 1;
    if found then
        raise exception using errcode = 'PA001',
            message = format('events[%s].%s', problem.idx, problem.problem),
            detail = format('index=%s', problem.idx);
    end if;

    -- 2. Lock (creating where new) the stream of every event not yet in the log, in
    --    (app, subject) order. ON CONFLICT DO UPDATE locks existing rows and waits for
    --    concurrent inserters of the same install.
    with wanted as (
        select distinct x.e->>'app' as app, x.e->>'subject' as subject
          from jsonb_array_elements(events) as x(e)
         where (select l.position from audit.events l where l.event_id = (x.e->>'eventId')::uuid) is null
    ), locked as (
        insert into audit.subject_streams as s (app, subject)
        select app, subject from wanted order by app, subject
        on conflict (app, subject) do update set next_version = s.next_version
        returning s.stream_key, s.next_version, s.app, s.subject
    )
    select array_agg(next_version) into versions from locked;

    -- 3. Optimistic concurrency, for a batch of one stream.
    if expected_version is not null then
        if (select count(distinct (x.e->>'app', x.e->>'subject')) from jsonb_array_elements(events) as x(e)) > 1 then
            raise exception using errcode = 'PA001',
                message = 'expected_version: applies only to a batch of one stream (app, subject)';
        end if;
        if cardinality(versions) = 1 and versions[1] - 1 <> expected_version then
            raise exception using errcode = 'PA003',
                message = format('wrong expected version: expected %s, the stream is at %s',
                                 expected_version, versions[1] - 1);
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
        -- The streams locked in step 2, read by their unique key (their next_version is as
        -- locked: only this statement's bumped step changes it, after this snapshot).
        select f.*, s.stream_key,
               s.next_version + row_number() over (partition by s.stream_key order by f.idx) - 1 as version
          from fresh f
          join audit.subject_streams s on s.app = f.app and s.subject = f.subject
    ), inserted as (
        insert into audit.events as l (event_id, stream_key, stream_version, type, occurred_at, app, platform,
                                       os_major, app_version, attempt, permission, flow, payload)
        select n.id, n.stream_key, n.version, n.e->>'type', (n.e->>'occurredAt')::timestamptz, n.app,
               n.e->>'platform', split_part(n.e->>'osVersion', '.', 1)::integer, n.e->>'appVersion',
               (n.e->>'attempt')::uuid, n.e->>'permission', n.e->>'flow', n.e - 'subject'
          from numbered n
         order by n.idx
        on conflict on constraint events_event_id_key do nothing
        returning l.event_id, l.position, l.stream_key, l.stream_version
    ), bumped as (
        update audit.subject_streams s
           set next_version = v.next_version
          from (select i.stream_key, max(i.stream_version) + 1 as next_version
                  from inserted i group by i.stream_key) as v
         where s.stream_key = v.stream_key
    ), results as (
        select b.idx, b.id, i.position,
               case
                   when i.position is not null then 'appended'
                   when b.idx <> f.idx then case when b.e = f.e then 'duplicate' else 'conflict' end
                   -- stored before: the same content and the same install (unless erased: no link)
                   when (select l.payload = b.e - 'subject'
                                and coalesce((select s.app = b.app and s.subject = b.subject
                                                from audit.subject_streams s
                                               where s.stream_key = l.stream_key), true)
                           from audit.events l where l.event_id = b.id) then 'duplicate'
                   else 'conflict'  -- different content, or a concurrent caller stored it for another install
               end as status
          from batch b
          join firsts f on f.id = b.id
          left join inserted i on i.event_id = b.id and b.idx = f.idx
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
        perform pg_notify('permaudit_events', '');
    end if;

    return query select * from unnest(ids, positions, statuses);
end;
$$;

comment on function audit.store_events(jsonb, bigint) is
    'The body of the write path (see audit.append_events); not called directly.';
