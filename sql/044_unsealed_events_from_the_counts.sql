-- 044: analytics.compliance_status counts the unsealed events from the counts it already has.
--
-- 028's unsealed_events counted the committed events after the last seal's end, one by one on
-- the committed-order index: 213 ms on an unsealed log of 5,000,000 events (the health
-- dashboard's "Last seal" panel; issue 6 asks for every panel under 200 ms at 5M), and growing
-- with the log. Both the seals and the projector cover a prefix of the log in committed order,
-- with its count: the seals' event_count add up to the events up to the last seal's end (the
-- chain is contiguous, 032), and projection.checkpoint.events_projected is the number of events
-- up to the projector's checkpoint (the projector never skips an event, 004 and 033). So where the
-- projector is at or past the last seal's end,
--     unsealed = events_projected - sealed events + events the projector has not reached
-- and only the events past the checkpoint are counted one by one (as analytics.projector_lag
-- counts them: few where the projector keeps up). Where the last seal is past the checkpoint
-- (sealed while the projector was behind), the events past the seal are fewer than those past
-- the checkpoint, and are counted as before, as they are where the counts cannot both be right
-- (more events sealed than projected up to a later point). Tampering that keeps the counts
-- plausible (a seal deleted, its count inflated, events deleted by a superuser) makes the
-- difference wrong; verify names such tampering of the seals and of sealed events, not the
-- deletion of events no seal covers yet.
--
-- The sealed events are summed once per read of the view (its sealed_events column and the
-- difference above both need them), over an index that holds each seal's count, so that the sum
-- reads no seal's leaves: a seal every 5 minutes (the compose projector's) is some 105,000 seals
-- a year. An index-only scan skips the table only on pages the visibility map marks all-visible,
-- which a vacuum does: autovacuum is asked to vacuum the seals every 1,000 new ones rather than
-- after a fifth of the table (PostgreSQL's default for inserts), so that few seals cost a visit.
-- The columns, their names and order stay. The counts come from a function (security definer, as
-- one of the view's readers, the analyst, may not read the log or the checkpoint; its probes
-- planned on the indexes even where the log's statistics call it empty, 040, and without JIT,
-- which that setting would otherwise start).

create index seals_event_counts on audit.seals (seal_id) include (event_count);
alter table audit.seals set (autovacuum_vacuum_insert_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0);

create function analytics.seal_counts(out sealed_events bigint, out unsealed_events bigint)
language plpgsql stable
security definer
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
    seal_end record;
    cp record;
begin
    sealed_events := (select coalesce(sum(a.event_count), 0) from audit.seals a);
    select s.to_transaction_id as t, s.to_position as p into seal_end from audit.seals s order by s.seal_id desc limit 1;
    select c.transaction_id as t, c.position as p, c.events_projected as n into cp
      from projection.checkpoint c where c.name = 'analytics';
    if cp.t is not null and (cp.t, cp.p) >= (coalesce(seal_end.t, '0'::xid8), coalesce(seal_end.p, 0))
       and cp.n >= sealed_events then
        unsealed_events := cp.n - sealed_events
                           + (select count(*) from audit.events e where (e.transaction_id, e.position) > (cp.t, cp.p));
    else
        unsealed_events := (select count(*) from audit.events e
                             where (e.transaction_id, e.position) > (coalesce(seal_end.t, '0'::xid8), coalesce(seal_end.p, 0)));
    end if;
end;
$$;
alter function analytics.seal_counts() owner to permaudit_owner;
revoke execute on function analytics.seal_counts() from public;
grant execute on function analytics.seal_counts() to permaudit_analyst, permaudit_auditor;

create or replace view analytics.compliance_status as
select s.seal_id as last_seal_id,
       s.sealed_at as last_sealed_at,
       c.sealed_events,
       greatest(0, coalesce((select max(e.position) from audit.events e), 0) - coalesce(s.to_position, 0))::bigint as unsealed_positions,
       v.at as last_verified_at,
       v.details->>'result' as last_verification,
       f.at as findings_at,
       (f.details->>'findings')::integer as open_findings,
       c.unsealed_events
  from analytics.seal_counts() as c
  left join lateral (select * from audit.seals order by seal_id desc limit 1) s on true
  left join lateral (select * from audit.access_log
                      where command = 'audit verify' and (details->>'range' = 'all' or details->>'result' = 'tampered')
                      order by access_id desc limit 1) v on true
  left join lateral (select * from audit.access_log where command = 'audit permissions' and details->>'app' = 'all'
                      order by access_id desc limit 1) f on true;
comment on view analytics.compliance_status is
    'The last seal, unsealed events, the last verdict on the whole log and the last over-permission findings count.';
