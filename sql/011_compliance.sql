-- 011: compliance. Least-privilege roles and a log owner that cannot log in; signed,
-- chained seals over the log in committed order; erasure of an install's link; the access
-- record of audit commands. See docs/security.md and docs/compliance.md.
--
-- Roles (NOLOGIN here; a deployment grants LOGIN and a password to the ones it uses):
--   permaudit_owner      owns every object of schemas audit, projection, analytics; cannot log in
--   permaudit_writer     audit.append_events and audit.record_rejected, nothing else
--   permaudit_projector  projection.apply_batch / reset, reads the log and the checkpoint, seals
--   permaudit_analyst    the analytics views only (007)
--   permaudit_auditor    the log, the seals, the records and the audit functions

do $$
declare
    name text;
begin
    foreach name in array array['permaudit_owner', 'permaudit_writer', 'permaudit_projector', 'permaudit_auditor'] loop
        if not exists (select 1 from pg_roles where rolname = name) then
            execute format('create role %I nologin', name);
        end if;
    end loop;
end;
$$;

-- 1. Seals: each covers the events after the previous seal's end up to its own end, in
--    committed order (transaction_id, position), with the RFC 6962 Merkle root of their leaf
--    hashes, the previous seal's hash, and an Ed25519 signature by a key kept outside the
--    database. The message signed is described in docs/compliance.md.
create table audit.seals (
    seal_id              bigint primary key check (seal_id >= 1),
    after_transaction_id xid8 not null,      -- exclusive start: the previous seal's end ('0', 0 for the first)
    after_position       bigint not null,
    to_transaction_id    xid8 not null,      -- inclusive end
    to_position          bigint not null,
    event_count          bigint not null check (event_count >= 1),
    merkle_root          bytea not null check (length(merkle_root) = 32),
    -- per event, in committed order: position (8 bytes, big-endian), event_id (16), leaf hash (32)
    leaves               bytea not null check (length(leaves) = 56 * event_count),
    previous_hash        bytea not null check (length(previous_hash) = 32),
    sealed_at            timestamptz not null,
    key_fingerprint      text not null,       -- hex SHA-256 of the raw Ed25519 public key
    seal_hash            bytea not null check (length(seal_hash) = 32),
    signature            bytea not null check (length(signature) = 64)
);
comment on table audit.seals is
    'Signed, chained Merkle seals over the log in committed order (docs/compliance.md).';

-- Adds the next seal of the chain (called by `permaudit audit seal`); the chain and the ranges
-- are checked here, under a lock, so concurrent sealers cannot fork it.
create function audit.add_seal(
    p_seal_id bigint, p_after_transaction_id xid8, p_after_position bigint,
    p_to_transaction_id xid8, p_to_position bigint, p_event_count bigint, p_merkle_root bytea, p_leaves bytea,
    p_previous_hash bytea, p_sealed_at timestamptz, p_key_fingerprint text, p_seal_hash bytea, p_signature bytea)
returns void
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    head record;
begin
    perform pg_advisory_xact_lock(hashtext('permaudit.seal'));
    select s.seal_id, s.to_transaction_id, s.to_position, s.seal_hash into head
      from audit.seals s order by s.seal_id desc limit 1;
    if coalesce(head.seal_id, 0) + 1 <> p_seal_id
       or (coalesce(head.to_transaction_id, '0'), coalesce(head.to_position, 0)) <> (p_after_transaction_id, p_after_position)
       or coalesce(head.seal_hash, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea) <> p_previous_hash then
        raise exception using errcode = 'PA020', message = 'seal does not continue the chain (another sealer ran first?)';
    end if;
    insert into audit.seals values (p_seal_id, p_after_transaction_id, p_after_position, p_to_transaction_id, p_to_position,
                                    p_event_count, p_merkle_root, p_leaves, p_previous_hash, p_sealed_at, p_key_fingerprint,
                                    p_seal_hash, p_signature);
end;
$$;

-- 2. Erasure: deleting an install's link row is the only change the log's tables allow. The
--    record keeps the app, the stream key and the reason, never the install id.
create table audit.erasures (
    erasure_id  bigint generated always as identity primary key,
    erased_at   timestamptz not null default now(),
    app         text not null,
    stream_key  bigint not null,
    reason      text not null,
    erased_by   text not null default current_user
);
comment on table audit.erasures is 'Append-only record of erased installs (without the install id).';

create function audit.erase_subject(p_app text, p_subject text, p_reason text)
returns bigint   -- the erased stream key, NULL when the install is unknown
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    key bigint;
begin
    if coalesce(btrim(p_reason), '') = '' then
        raise exception using errcode = 'PA021', message = 'reason: an erasure needs a reason';
    end if;
    delete from audit.subject_streams where app = p_app and subject = p_subject returning stream_key into key;
    if key is not null then
        insert into audit.erasures (app, stream_key, reason, erased_by) values (p_app, key, p_reason, session_user);
    end if;
    return key;
end;
$$;

-- The events of one install, for an access request (the install id is the caller's input; the
-- result carries only the log's columns and the seal that covers each event).
create function audit.subject_events(p_app text, p_subject text)
returns table ("position" bigint, transaction_id xid8, event_id uuid, stream_version bigint, recorded_at timestamptz,
               payload jsonb, seal_id bigint)
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
    select e.position, e.transaction_id, e.event_id, e.stream_version, e.recorded_at, e.payload,
           (select s.seal_id from audit.seals s
             where (e.transaction_id, e.position) > (s.after_transaction_id, s.after_position)
               and (e.transaction_id, e.position) <= (s.to_transaction_id, s.to_position))
      from audit.subject_streams l
      join audit.events e on e.stream_key = l.stream_key
     where l.app = p_app and l.subject = p_subject
     order by e.stream_version;
$$;

-- 3. The access record: who ran which audit command, when, on what (never an install id).
create table audit.access_log (
    access_id  bigint generated always as identity primary key,
    at         timestamptz not null default now(),
    role_name  text not null default current_user,
    login_name text not null default session_user,
    command    text not null,
    details    jsonb not null default '{}'
);
comment on table audit.access_log is 'Append-only record of audit commands run against this database.';

create function audit.record_access(p_command text, p_details jsonb)
returns void
language sql
security definer
set search_path = pg_catalog, pg_temp
as $$
    insert into audit.access_log (role_name, login_name, command, details)
    values (session_user, session_user, p_command, coalesce(p_details, '{}'));
$$;

-- 4. The records are append-only too (the log's triggers of 001, also in replica mode).
do $$
declare
    t text;
begin
    foreach t in array array['seals', 'erasures', 'access_log'] loop
        execute format('create trigger %I before update or delete on audit.%I for each statement execute function audit.forbid_change()', t || '_append_only', t);
        execute format('create trigger %I before truncate on audit.%I for each statement execute function audit.forbid_change()', t || '_no_truncate', t);
        execute format('alter table audit.%I enable always trigger %I', t, t || '_append_only');
        execute format('alter table audit.%I enable always trigger %I', t, t || '_no_truncate');
    end loop;
end;
$$;

-- 5. The write path and the projector run as the owner (security definer), so their callers
--    need no privilege on the tables.
alter function audit.append_events(jsonb, bigint) security definer set search_path = pg_catalog, pg_temp;
alter function audit.record_rejected(date, text, text, integer) security definer set search_path = pg_catalog, pg_temp;
alter function projection.apply_batch(integer) security definer set search_path = pg_catalog, pg_temp;
alter function projection.reset() security definer set search_path = pg_catalog, pg_temp;

-- 6. Ownership: everything belongs to permaudit_owner, which cannot log in.
do $$
declare
    o record;
begin
    for o in select n.nspname from pg_namespace n where n.nspname in ('audit', 'projection', 'analytics') loop
        execute format('alter schema %I owner to permaudit_owner', o.nspname);
    end loop;
    for o in select n.nspname, c.relname, c.relkind
               from pg_class c join pg_namespace n on n.oid = c.relnamespace
              where n.nspname in ('audit', 'projection', 'analytics') and c.relkind in ('r', 'v', 'm', 'p')
    loop
        execute format('alter %s %I.%I owner to permaudit_owner',
                       case o.relkind when 'v' then 'view' when 'm' then 'materialized view' else 'table' end, o.nspname, o.relname);
    end loop;
    for o in select p.oid::regprocedure as signature
               from pg_proc p join pg_namespace n on n.oid = p.pronamespace
              where n.nspname in ('audit', 'projection', 'analytics')
    loop
        execute format('alter function %s owner to permaudit_owner', o.signature);
    end loop;
end;
$$;

-- 7. Privileges: nothing by default, then each role what it needs.
revoke all on all tables in schema audit, projection from public;
revoke execute on all functions in schema audit, projection from public;

grant usage on schema audit to permaudit_writer, permaudit_projector, permaudit_auditor;
grant execute on function audit.append_events(jsonb, bigint), audit.record_rejected(date, text, text, integer) to permaudit_writer;

grant usage on schema projection to permaudit_projector, permaudit_auditor;
grant execute on function projection.apply_batch(integer), projection.reset() to permaudit_projector;
grant select on audit.events, audit.seals, projection.checkpoint to permaudit_projector;
grant execute on function audit.add_seal(bigint, xid8, bigint, xid8, bigint, bigint, bytea, bytea, bytea, timestamptz, text, bytea, bytea)
    to permaudit_projector, permaudit_auditor;

grant select on audit.events, audit.seals, audit.erasures, audit.access_log, audit.intake_anomalies to permaudit_auditor;
grant select on all tables in schema projection to permaudit_auditor;
grant usage on schema analytics to permaudit_auditor;
grant select on all tables in schema analytics to permaudit_auditor;
grant execute on function audit.erase_subject(text, text, text), audit.subject_events(text, text),
    audit.record_access(text, jsonb) to permaudit_auditor;
