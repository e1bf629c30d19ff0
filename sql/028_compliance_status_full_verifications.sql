-- 028: analytics.compliance_status (013) no longer shows a log as intact after tampering was
-- found, and counts the events that are not sealed yet.
--
-- 1. last_verification was the result of the newest `permaudit audit verify`, whatever it
--    checked: a check of a range (--from/--to) that found its own events intact replaced a
--    verdict of tampering elsewhere in the log. Now it is the newest verification of the whole
--    log, or a newer one of a range that found tampering.
-- 2. unsealed_positions (positions taken after the last sealed one) misses an event whose
--    position was taken before the last sealed one and that committed after it (seals follow the
--    committed order). unsealed_events counts the committed events after the last seal's end in
--    that order, on the committed-order index; unsealed_positions stays for existing dashboards.
-- The columns keep their names and order; unsealed_events is added at the end.

create or replace view analytics.compliance_status as
select s.seal_id as last_seal_id,
       s.sealed_at as last_sealed_at,
       coalesce((select sum(a.event_count) from audit.seals a), 0)::bigint as sealed_events,
       greatest(0, coalesce((select max(e.position) from audit.events e), 0) - coalesce(s.to_position, 0))::bigint as unsealed_positions,
       v.at as last_verified_at,
       v.details->>'result' as last_verification,
       f.at as findings_at,
       (f.details->>'findings')::integer as open_findings,
       (select count(*)
          from audit.events e
         where (e.transaction_id, e.position) > (coalesce(s.to_transaction_id, '0'::xid8), coalesce(s.to_position, 0)))
           as unsealed_events
  from (select 1) as one
  left join lateral (select * from audit.seals order by seal_id desc limit 1) s on true
  left join lateral (select * from audit.access_log
                      where command = 'audit verify' and (details->>'range' = 'all' or details->>'result' = 'tampered')
                      order by access_id desc limit 1) v on true
  left join lateral (select * from audit.access_log where command = 'audit permissions' and details->>'app' = 'all'
                      order by access_id desc limit 1) f on true;
comment on view analytics.compliance_status is
    'The last seal, unsealed events, the last verdict on the whole log and the last over-permission findings count.';
