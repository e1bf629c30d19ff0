-- 024: an access request records itself.
--
-- audit.subject_events (011) returns every event of one install: the database's answer to an
-- access request. Until now only the CLI recorded such a request (`permaudit audit subject`
-- calls audit.record_access after the export), so an auditor who called the function directly in
-- SQL exported an install's events without a trace in audit.access_log. The function now writes
-- the record itself, in the caller's transaction: command 'audit.subject_events', the app and
-- the number of events, never the install id. The CLI no longer adds a record of its own.
-- A caller that rolls its transaction back takes that row with it; the server log keeps a line
-- (RAISE LOG, not sent to the client) either way. A read-only transaction (a hot standby)
-- cannot export: the record cannot be written there.
--
-- The body is 011's query; it becomes PL/pgSQL (a read function that writes must be VOLATILE).
-- CREATE OR REPLACE keeps the owner and the grants; security definer and search_path are
-- restated.

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
    raise log 'permaudit access request: audit.subject_events by %, app %, % events', session_user, p_app, n;
    insert into audit.access_log (role_name, login_name, command, details)
    values (session_user, session_user, 'audit.subject_events', jsonb_build_object('app', p_app, 'events', n));
end;
$$;

comment on function audit.subject_events(text, text) is
    'Every event of one install (an access request), in stream order; records the request in audit.access_log (app and count, never the install id).';
