-- 015: a cheaper write path, with the same rules and the same answers.
--
-- Measured on a batch of 1000 events over 1000 installs (BENCHMARKS.md), the 010 write path spent
-- about 115 ms walking audit.event_problem (PL/pgSQL, one statement per rule) and 25 ms locking
-- the streams with an upsert that wrote a new version of every stream row, before bumping it again.
--
-- 1. audit.event_is_valid(e) is one SQL expression, inlined into the batch's scan. It is true only
--    for events that follow every rule of wire format v1, and it errs on the safe side: an event
--    it cannot clear cheaply (a leap day, an attribute holding an object, an '@' in the subject,
--    experiments longer than 64 characters of JSON, ...) is false, and audit.event_problem, which
--    stays the definition and names the field and the rule, decides. So the write path accepts
--    exactly what 002 accepts, and only pays for the rule walk on events that need it.
-- 2. The streams of a batch are created where new (ON CONFLICT DO NOTHING) and then locked with
--    SELECT ... FOR NO KEY UPDATE in (app, subject) order: a row lock, not a new row version.
--    Concurrent callers still serialise per stream in one order, so they do not deadlock.
-- 3. A stream's next version is its last version in the log plus one, read under that lock in a
--    new snapshot (an index probe on (stream_key, stream_version)). The link table's next_version,
--    which every batch updated, is dropped: in one long ingest transaction those updates left a
--    chain of unprunable row versions behind every install.
-- 4. A call with one event takes a shorter path through the same steps.
-- 5. The duplicates of a call are counted (audit.intake_anomalies) where they are found, and
--    audit.append_events holds the whole write path again; 008's wrapper and audit.store_events go.

-- The ranges of a timestamp that has the RFC 3339 shape: a date up to the 28th of February, hours,
-- minutes, seconds, at most 9 fraction digits, an offset within +-15:59 (what PostgreSQL stores).
create function audit.is_plain_rfc3339(t text)
returns boolean
language sql immutable parallel safe
as $$
    select octet_length(split_part(t, '-', 1)) = 4 and left(t, 4) <> '0000'
       and substr(t, 6, 2)::integer between 1 and 12
       and substr(t, 9, 2)::integer between 1 and case substr(t, 6, 2) when '02' then 28
                                                                     when '04' then 30 when '06' then 30
                                                                     when '09' then 30 when '11' then 30
                                                                     else 31 end
       and substr(t, 12, 2)::integer <= 23 and substr(t, 15, 2)::integer <= 59 and substr(t, 18, 2)::integer <= 59
       and case when right(t, 1) in ('Z', 'z') then octet_length(t) <= 30
                else octet_length(t) <= 35 and substr(right(t, 6), 2, 2)::integer <= 15
                     and substr(right(t, 6), 5, 2)::integer <= 59
           end
$$;

-- A JSON integer written as plain digits, from minimum up to 999,999,999.
create function audit.is_small_count(v jsonb, minimum integer)
returns boolean
language sql immutable parallel safe
as $$
    select jsonb_typeof(v) = 'number' and v::text ~ '^[0-9]+$' and octet_length(v::text) <= 9
       and (v::text)::integer >= minimum
$$;

create function audit.event_is_valid(e jsonb, server_time timestamptz default now())
returns boolean
language sql stable parallel safe
as $$
    select coalesce(
           jsonb_typeof(e) = 'object'
       and octet_length(e::text) <= 16384
       and e - array['eventId', 'type', 'occurredAt', 'app', 'subject', 'platform', 'osVersion', 'appVersion',
                     'attempt', 'permission', 'flow', 'experiments', 'attributes'] = '{}'
       -- eventId (and attempt below): 36 characters, hexadecimal groups 8-4-4-4-12
       and e->>'eventId' like '________-____-____-____-____________'
       and e->>'eventId' ~ '^[0-9A-Fa-f]+-[0-9A-Fa-f]+-[0-9A-Fa-f]+-[0-9A-Fa-f]+-[0-9A-Fa-f]+$'
       -- occurredAt: the RFC 3339 shape, then the ranges (29 February goes to the rule walk)
       and e->>'occurredAt' ~ '^[0-9]+-[0-9][0-9]-[0-9][0-9][Tt][0-9][0-9]:[0-9][0-9]:[0-9][0-9](\.[0-9]+)?([Zz]|[+-][0-9][0-9]:[0-9][0-9])$'
       and audit.is_plain_rfc3339(e->>'occurredAt')
       and (e->>'occurredAt')::timestamptz <= server_time + interval '24 hours'
       -- the strings: type checks first (a number would pass the character checks)
       and jsonb_typeof(e->'app') = 'string' and jsonb_typeof(e->'subject') = 'string'
       and jsonb_typeof(e->'osVersion') = 'string' and jsonb_typeof(e->'appVersion') = 'string'
       and octet_length(e->>'app') between 1 and 255 and e->>'app' ~ '^[A-Za-z0-9._-]+$'
       and char_length(e->>'subject') between 1 and 128 and strpos(e->>'subject', '@') = 0
       and octet_length(e->>'osVersion') <= 32 and e->>'osVersion' ~ '^[0-9]+(\.[0-9]+)*$'
       and octet_length(split_part(e->>'osVersion', '.', 1)) <= 9
       and char_length(e->>'appVersion') between 1 and 64
       and case e->>'platform'
               when 'ios' then not e ? 'permission' or e->>'permission' in ('ios.photos.readWrite', 'ios.photos.addOnly')
               when 'android' then not e ? 'permission' or e->>'permission' in ('android.READ_MEDIA_IMAGES', 'android.READ_MEDIA_VIDEO',
                                                                                'android.READ_MEDIA_VISUAL_USER_SELECTED',
                                                                                'android.READ_EXTERNAL_STORAGE',
                                                                                'android.WRITE_EXTERNAL_STORAGE')
           end
       and (not e ? 'attempt'
            or (e->>'attempt' like '________-____-____-____-____________'
                and e->>'attempt' ~ '^[0-9A-Fa-f]+-[0-9A-Fa-f]+-[0-9A-Fa-f]+-[0-9A-Fa-f]+-[0-9A-Fa-f]+$'))
       and (not e ? 'flow'
            or (jsonb_typeof(e->'flow') = 'string' and octet_length(e->>'flow') between 1 and 64
                and e->>'flow' ~ '^[A-Za-z0-9._-]+$'))
       -- experiments: string values, and short enough as a whole that no key or value passes 64
       and (not e ? 'experiments'
            or (octet_length((e->'experiments')::text) <= 64
                and jsonb_path_match(e->'experiments', 'strict $.type() == "object" && !exists($.keyvalue() ? (@.value.type() != "string" || @.value == "" || @.key == ""))')))
       -- attributes: an object of scalars (so no event nests deeper than 2)
       and (not e ? 'attributes'
            or jsonb_path_match(e->'attributes', 'strict $.type() == "object" && !exists($.* ? (@.type() == "object" || @.type() == "array"))'))
       and case e->>'type'
               when 'prePermission.shown' then e ? 'attempt' and e ? 'permission'
                    and coalesce(jsonb_typeof(e->'attributes'->'screen') = 'string', true)
               when 'prePermission.accepted' then e ? 'attempt' and e ? 'permission'
               when 'prePermission.declined' then e ? 'attempt' and e ? 'permission'
               when 'permission.prompted' then e ? 'attempt' and e ? 'permission'
                    and coalesce(jsonb_typeof(e->'attributes'->'dialogShown') = 'boolean', true)
               when 'permission.granted' then e ? 'attempt' and e ? 'permission'
               when 'permission.limited' then e ? 'attempt' and e ? 'permission'
               when 'permission.denied' then e ? 'attempt' and e ? 'permission'
                    and coalesce(jsonb_typeof(e->'attributes'->'permanent') = 'boolean', true)
               when 'permission.restricted' then e ? 'attempt' and e ? 'permission'
               when 'picker.opened' then e ? 'attempt' and not e ? 'permission'
                    and e->'attributes'->>'picker' in ('phpicker', 'androidPhotoPicker', 'androidOpenDocument')
                    and (not e->'attributes' ? 'selectionLimit' or audit.is_small_count(e->'attributes'->'selectionLimit', 0))
               when 'picker.completed' then e ? 'attempt' and not e ? 'permission'
                    and audit.is_small_count(e->'attributes'->'selectedCount', 1)
               when 'picker.cancelled' then e ? 'attempt' and not e ? 'permission'
               when 'limitedSelection.changed' then e ? 'permission'
                    and e->'attributes'->>'trigger' in ('app', 'system', 'settings')
                    and (not e->'attributes' ? 'selectedCount' or audit.is_small_count(e->'attributes'->'selectedCount', 0))
               when 'permission.statusObserved' then e ? 'permission'
                    and e->'attributes'->>'status' in ('notDetermined', 'granted', 'limited', 'denied', 'restricted')
               when 'settings.opened' then e ? 'permission'
           end,
           false)
$$;

comment on function audit.event_is_valid(jsonb, timestamptz) is
    'True only for an event that follows wire format v1 (cheap, conservative); when false, audit.event_problem decides.';

-- 3 above: versions come from the log.
alter table audit.subject_streams drop column next_version;
comment on table audit.subject_streams is
    'Link table: install (app, subject) -> stream key; appends lock the row. Erasure deletes the row.';

-- Whether the log holds this event: NULL when its id is not stored, true when it is stored with the
-- same content for the same install (or the install was erased: no link left), else false.
create function audit.stored_copy(e jsonb)
returns boolean
language sql stable parallel safe
as $$
    select (select l.payload = e - 'subject'
                   and coalesce((select s.app = e->>'app' and s.subject = e->>'subject'
                                   from audit.subject_streams s where s.stream_key = l.stream_key), true)
              from audit.events l where l.event_id = (e->>'eventId')::uuid)
$$;

-- 5 above: the write path in one function (security definer, as 011 made the wrapper).
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
                raise exception using errcode = 'PA003',
                    message = format('wrong expected version: expected %s, the stream is at %s', expected_version, version);
            end if;
            insert into audit.events as l (event_id, stream_key, stream_version, type, occurred_at, app, platform,
                                           os_major, app_version, attempt, permission, flow, payload)
            values ((e->>'eventId')::uuid, key, version + 1, e->>'type', (e->>'occurredAt')::timestamptz, e->>'app',
                    e->>'platform', split_part(e->>'osVersion', '.', 1)::integer, e->>'appVersion',
                    (e->>'attempt')::uuid, e->>'permission', e->>'flow', e - 'subject')
            on conflict on constraint events_event_id_key do nothing
            returning l.position into pos;
            if pos is not null then
                perform pg_notify('permaudit_events', '');
                return query select (e->>'eventId')::uuid, pos, 'appended'::text;
                return;
            end if;
            -- A concurrent caller stored this id first: compare with what it stored.
            stored := audit.stored_copy(e);
        end if;
        if not stored then
            raise exception using errcode = 'PA002',
                message = 'events[0].eventId: an event with this id was already stored with different content',
                detail = 'index=0';
        end if;
        insert into audit.intake_anomalies (day, app, platform, duplicates)
        values (((e->>'occurredAt')::timestamptz at time zone 'UTC')::date, e->>'app', e->>'platform', 1);
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

    perform
       from unnest(apps, subjects) with ordinality as w(app, subject, n)
       join lateral (select from audit.subject_streams l
                      where l.app = w.app and l.subject = w.subject
                        for no key update) as s on true;

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
        if cardinality(apps) = 1 and version <> expected_version then
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
        -- The streams locked in step 2, read by their unique key; each continues after the
        -- last version in the log (read in this statement's snapshot, taken under the locks).
        select f.*, s.stream_key,
               coalesce(v.last_version, -1) + row_number() over (partition by s.stream_key order by f.idx) as version
          from fresh f
          join audit.subject_streams s on s.app = f.app and s.subject = f.subject
          left join lateral (select max(l.stream_version) as last_version
                               from audit.events l where l.stream_key = s.stream_key) as v on true
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
        select ((r.e->>'occurredAt')::timestamptz at time zone 'UTC')::date, r.e->>'app', r.e->>'platform', count(*)
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
        perform pg_notify('permaudit_events', '');
    end if;

    return query select * from unnest(ids, positions, statuses);
end;
$$;

drop function audit.store_events(jsonb, bigint);

-- The owner and the privileges of 011 for what this migration creates.
alter function audit.is_plain_rfc3339(text) owner to permaudit_owner;
alter function audit.is_small_count(jsonb, integer) owner to permaudit_owner;
alter function audit.event_is_valid(jsonb, timestamptz) owner to permaudit_owner;
alter function audit.stored_copy(jsonb) owner to permaudit_owner;
revoke execute on all functions in schema audit from public;
