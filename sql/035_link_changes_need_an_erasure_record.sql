-- 035: from a second privacy and compliance review.
--
-- 1. A link row is deleted only with a record of its erasure. 032 let a delete through when the
--    transaction-local setting permaudit.erasing was on, which audit.erase_subject set; but any
--    role can set a custom setting, so the table's owner (or a superuser) could delete a link
--    with no row in audit.erasures. The delete now needs a row in audit.erasures for its stream
--    key (append-only: it stays), which audit.erase_subject writes before it deletes.
-- 2. A new link row must start a new stream. The owner could insert a link with OVERRIDING SYSTEM
--    VALUE for the stream key of an erased install (an access request then answered with the
--    erased events) or of another install. Links are refused for a stream key that has events;
--    the write path's links always draw a fresh key. A statement trigger over the inserted rows
--    (a transition table), so the write path's INSERT ... ON CONFLICT pays once per statement
--    and one index probe per new install.
-- 3. audit.erase_subject writes a server LOG line for every call, as an access request does
--    (024, 032): rolled back, an erasure of a known install still told its caller the stream key
--    (and so the install's events, which the auditor can read) without leaving a trace.
-- 4. audit.record_access: the projector may record only `audit seal` (032 granted it for that).
--    It could record an `audit verify` with any result, which analytics.compliance_status shows
--    as the last verification.

-- 1.
create index erasures_stream_key on audit.erasures (stream_key);

create or replace function audit.guard_link_change() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op = 'DELETE' and exists (select from audit.erasures e where e.stream_key = old.stream_key) then
        return old;
    end if;
    raise exception using
        errcode = 'PA010',
        message = format('audit.subject_streams changes only by erasure: %s is not allowed', tg_op),
        hint = 'Installs are erased only by audit.erase_subject, which records the erasure.';
end;
$$;

-- 1 and 3: 032's erasure, recording before it deletes, and logging every call.
create or replace function audit.erase_subject(p_app text, p_subject text, p_reason text)
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
    select s.stream_key into key from audit.subject_streams s where s.app = p_app and s.subject = p_subject for update;
    raise log 'permaudit erasure: audit.erase_subject by %, app %, %',
        coalesce(nullif(current_setting('role', true), 'none'), session_user), p_app,
        case when key is null then 'no such install' else format('stream %s', key) end;
    if key is not null then
        insert into audit.erasures (app, stream_key, reason, erased_by) values (p_app, key, p_reason, session_user);
        delete from audit.subject_streams s where s.stream_key = key;
    end if;
    return key;
end;
$$;

-- 2.
create function audit.guard_link_insert() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if exists (select from inserted i
                cross join lateral (select from audit.events e where e.stream_key = i.stream_key limit 1) as used) then
        raise exception using
            errcode = 'PA010',
            message = 'audit.subject_streams: a new link must start a new stream; this stream key already has events',
            hint = 'The write path creates links with a fresh stream key; an erased install''s stream stays unlinked.';
    end if;
    return null;
end;
$$;

create trigger subject_streams_new_streams_only
    after insert on audit.subject_streams
    referencing new table as inserted
    for each statement execute function audit.guard_link_insert();
alter table audit.subject_streams enable always trigger subject_streams_new_streams_only;

-- 4. 011's record, refusing the projector anything but a seal.
create or replace function audit.record_access(p_command text, p_details jsonb)
returns void
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    caller name := coalesce(nullif(current_setting('role', true), 'none'), session_user);
begin
    if p_command <> 'audit seal'
       and not (pg_has_role(caller, 'permaudit_auditor', 'MEMBER') or pg_has_role(caller, 'permaudit_owner', 'MEMBER')) then
        raise exception using errcode = '42501',
            message = format('permission denied: %s may record only ''audit seal'' in audit.access_log', caller);
    end if;
    insert into audit.access_log (role_name, login_name, command, details)
    values (session_user, session_user, p_command, coalesce(p_details, '{}'));
end;
$$;

alter function audit.guard_link_change() owner to permaudit_owner;
alter function audit.guard_link_insert() owner to permaudit_owner;
revoke execute on function audit.guard_link_insert() from public;
