-- 032: from a privacy and compliance review.
--
-- 1. The link table (audit.subject_streams, install id -> stream key) changes only by erasure.
--    The roles had no privilege on it, but its owner (and a superuser) could update, delete or
--    truncate it without a trace: give one install's events to another (an access request then
--    answers with them), or erase an install without a row in audit.erasures. The seals cannot
--    cover the link (erasure must be able to delete it), so the table refuses those changes
--    itself, also in replica mode: an update that changes a row (the write path's no-op update,
--    which only locks the row, passes), a truncate, and a delete outside audit.erase_subject,
--    which alone sets the transaction-local flag permaudit.erasing. As for the log, only
--    disabling the triggers (owner, superuser) gets past them.
-- 2. The server log line of an access request names the role taken with SET ROLE, as 030 made
--    the access record do (it named the login).
-- 3. A new seal's range must be the log's (a trigger on audit.seals; add_seal stays as 011
--    wrote it): it ends at an event of the log, below the oldest running transaction (no event
--    can commit into it later), and counts the events in its range. A sealing role could add a seal reaching past the log's end; every
--    event appended later then fell inside it, and `audit seal` found nothing left to seal.
-- 4. The projector may write the access record: `permaudit audit seal` run as the projector
--    stored its seal and then failed on the record (42501), leaving the seal unrecorded.
-- 5. No statistics on install ids: ANALYZE kept a sample of them in pg_statistic (the most
--    common values and histogram bounds), where an erased install id stayed. Lookups go through
--    the (app, subject) unique index, which needs no histogram. Removing the sample already
--    taken needs a superuser; a migration run by another role says so.

-- 1.
create function audit.guard_link_change() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if tg_op = 'DELETE' and current_setting('permaudit.erasing', true) = 'on' then
        return old;
    end if;
    raise exception using
        errcode = 'PA010',
        message = format('audit.subject_streams changes only by erasure: %s is not allowed', tg_op),
        hint = 'Installs are erased only by audit.erase_subject, which records the erasure.';
end;
$$;

create trigger subject_streams_change_by_erasure
    before update on audit.subject_streams
    for each row when (old is distinct from new) execute function audit.guard_link_change();
create trigger subject_streams_delete_by_erasure
    before delete on audit.subject_streams
    for each row execute function audit.guard_link_change();
create trigger subject_streams_no_truncate
    before truncate on audit.subject_streams
    for each statement execute function audit.guard_link_change();
alter table audit.subject_streams enable always trigger subject_streams_change_by_erasure;
alter table audit.subject_streams enable always trigger subject_streams_delete_by_erasure;
alter table audit.subject_streams enable always trigger subject_streams_no_truncate;

-- 011's erasure, with the flag set around its delete.
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
    perform set_config('permaudit.erasing', 'on', true);
    delete from audit.subject_streams where app = p_app and subject = p_subject returning stream_key into key;
    perform set_config('permaudit.erasing', 'off', true);
    if key is not null then
        insert into audit.erasures (app, stream_key, reason, erased_by) values (p_app, key, p_reason, session_user);
    end if;
    return key;
end;
$$;

-- 2. 024's access request, its LOG line naming the role as audit.access_log_role (030) does.
create or replace function audit.subject_events(p_app text, p_subject text)
returns table ("position" bigint, transaction_id xid8, event_id uuid, stream_version bigint, recorded_at timestamptz,
               payload jsonb, seal_id bigint)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
    n bigint;
begin
    return query
    select e.position, e.transaction_id, e.event_id, e.stream_version, e.recorded_at, e.payload,
           (select s.seal_id from audit.seals s
             where (e.transaction_id, e.position) > (s.after_transaction_id, s.after_position)
               and (e.transaction_id, e.position) <= (s.to_transaction_id, s.to_position))
      from audit.subject_streams l
      join audit.events e on e.stream_key = l.stream_key
     where l.app = p_app and l.subject = p_subject
     order by e.stream_version;
    get diagnostics n = row_count;
    raise log 'permaudit access request: audit.subject_events by %, app %, % events',
        coalesce(nullif(current_setting('role', true), 'none'), session_user), p_app, n;
    insert into audit.access_log (role_name, login_name, command, details)
    values (session_user, session_user, 'audit.subject_events', jsonb_build_object('app', p_app, 'events', n));
end;
$$;

-- 3. A seal's range, checked as add_seal (011) inserts it, after its check of the chain.
create function audit.check_seal_range() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if new.to_transaction_id >= pg_snapshot_xmin(pg_current_snapshot())
       or not exists (select from audit.events e where e.transaction_id = new.to_transaction_id and e.position = new.to_position)
       or new.event_count <> (select count(*) from audit.events e
                               where (e.transaction_id, e.position) > (new.after_transaction_id, new.after_position)
                                 and (e.transaction_id, e.position) <= (new.to_transaction_id, new.to_position)) then
        raise exception using errcode = 'PA020',
            message = 'seal range is not the log''s: it must end at an event committed before the oldest running transaction and count the events it covers';
    end if;
    return new;
end;
$$;

create trigger seals_cover_the_log before insert on audit.seals
    for each row execute function audit.check_seal_range();
alter table audit.seals enable always trigger seals_cover_the_log;

-- 4.
grant execute on function audit.record_access(text, jsonb) to permaudit_projector;

-- 5.
alter table audit.subject_streams alter column subject set statistics 0;
do $$
begin
    if (select rolsuper from pg_roles where rolname = current_user) then
        delete from pg_statistic
         where starelid = 'audit.subject_streams'::regclass
           and staattnum = (select attnum from pg_attribute where attrelid = 'audit.subject_streams'::regclass and attname = 'subject');
    else
        raise notice 'statistics sampled from audit.subject_streams.subject stay until a superuser deletes them from pg_statistic';
    end if;
end;
$$;

alter function audit.guard_link_change() owner to permaudit_owner;
alter function audit.check_seal_range() owner to permaudit_owner;
revoke execute on function audit.guard_link_change(), audit.check_seal_range() from public;
