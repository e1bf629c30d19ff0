-- 027: the auditor reads no install id outside an access request; erased installs leave the
-- findings.
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
