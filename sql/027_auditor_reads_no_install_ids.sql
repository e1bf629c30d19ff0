-- 027: the auditor reads no install id outside an access request; erased installs leave the
-- findings; a refused change names how rows are added to that table.
--
-- 1. The auditor read analytics.permission_state (app, install id, permission, state, since) and
--    the log (audit.events: stream key, occurred_at, payload). Joined on (app, permission, since),
--    the two gave back the install id -> stream key link of most installs, and with it every event
--    of an install, without audit.subject_events and so without a row in audit.access_log. The
--    auditor no longer reads analytics.permission_state; what it needs of it, the number of
--    installs per state, is analytics.permission_state_counts, which holds no install id.
--    The analyst keeps analytics.permission_state (the contract's view): it reads no log.
-- 2. The report's "limited-never-offered" finding counted the states of projection.permission_state,
--    which keeps a row for an erased install (a rebuild computes it again from the log);
--    analytics.permission_state has none. projection.linked_permission_state is the stored states
--    of installs still linked (not erased), by stream key, for the finding; the auditor may read it.

create view analytics.permission_state_counts as
select p.app, p.permission, p.state, count(*) as installs
  from projection.permission_state p
  join audit.subject_streams s on s.stream_key = p.stream_key
 group by p.app, p.permission, p.state;
comment on view analytics.permission_state_counts is
    'Installs per app, permission and current state (erased installs excluded); no install ids.';

create view projection.linked_permission_state as
select p.*
  from projection.permission_state p
 where exists (select 1 from audit.subject_streams s where s.stream_key = p.stream_key);
comment on view projection.linked_permission_state is
    'projection.permission_state without the installs that were erased (their link is gone).';

alter view analytics.permission_state_counts owner to permaudit_owner;
alter view projection.linked_permission_state owner to permaudit_owner;
grant select on analytics.permission_state_counts to permaudit_analyst, permaudit_auditor;
grant select on projection.linked_permission_state to permaudit_auditor;
revoke select on analytics.permission_state from permaudit_auditor;

-- 3. The refusal of a change to an append-only table names how rows are added to that table
--    (001's hint named the write path for every table, also the records of 011).
create or replace function audit.forbid_change() returns trigger
language plpgsql as $$
begin
    raise exception using
        errcode = 'PA010',
        message = format('audit.%s is append-only: %s is not allowed', tg_table_name, tg_op),
        hint = case tg_table_name
                   when 'events' then 'Events are added only through audit.append_events(jsonb).'
                   when 'seals' then 'Seals are added only through audit.add_seal.'
                   when 'erasures' then 'Erasures are recorded only by audit.erase_subject.'
                   when 'access_log' then 'Access records are added only by audit.subject_events and audit.record_access.'
               end;
end;
$$;
