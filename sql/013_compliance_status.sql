-- 013: compliance at a glance, for the log-health dashboard (readable by the analyst role):
-- the last seal, what is not sealed yet, the last verification and the last findings count,
-- as recorded by `permaudit audit` in audit.access_log. One row; cheap at any log size.

create view analytics.compliance_status as
select s.seal_id as last_seal_id,
       s.sealed_at as last_sealed_at,
       coalesce((select sum(a.event_count) from audit.seals a), 0)::bigint as sealed_events,
       -- positions taken after the last sealed one: an upper bound of the unsealed events
       -- (a rolled-back append leaves a gap), read from the primary key's end
       greatest(0, coalesce((select max(e.position) from audit.events e), 0) - coalesce(s.to_position, 0))::bigint as unsealed_positions,
       v.at as last_verified_at,
       v.details->>'result' as last_verification,
       f.at as findings_at,
       (f.details->>'findings')::integer as open_findings
  from (select 1) as one
  left join lateral (select * from audit.seals order by seal_id desc limit 1) s on true
  left join lateral (select * from audit.access_log where command = 'audit verify' order by access_id desc limit 1) v on true
  left join lateral (select * from audit.access_log where command = 'audit permissions' and details->>'app' = 'all'
                      order by access_id desc limit 1) f on true;
comment on view analytics.compliance_status is
    'The last seal, unsealed positions, the last verification result and the last over-permission findings count.';

alter view analytics.compliance_status owner to permaudit_owner;
grant select on analytics.compliance_status to permaudit_analyst, permaudit_auditor;
create index access_log_command on audit.access_log (command, access_id);
