-- 042: appends are refused while the cluster's transaction counter is behind the log.
--
-- Readers take the log in committed order, (transaction_id, position), below the oldest running
-- transaction (004). transaction_id is pg_current_xact_id(): the cluster's transaction counter.
-- A physical copy of the cluster (pg_basebackup, a volume or provider snapshot, point-in-time
-- recovery) keeps that counter; a logical dump (pg_dump) does not. Restored into another cluster,
-- the log holds transaction ids that cluster has not reached yet, and the events appended there
-- took smaller ones: the projector and the seals, past the restored events already, passed them
-- by for good, `project --status` showed no lag, and `audit verify` found events inside a sealed
-- range. Until the counter is moved past the log (docs/deployment.md, "Restoring a logical
-- dump"), every insert into the log fails with PA004 instead.
--
-- The invariant: a committed transaction's id is below the xmax of any later snapshot (one past
-- the newest transaction that ended), and a statement sees committed rows and its own
-- transaction's, whose id may be at or above xmax. So the newest id in sight, unless it is this
-- transaction's, is below xmax. (Comparing with this transaction's id instead would refuse the
-- ordinary case of a transaction that took its id before a later one appended and committed.)
-- One probe of the committed-order index, never a scan of the log, even where its statistics
-- call it empty (040); the log only: the write path never waits for a lock on the projection.
-- (A transaction that took its id before the counter was moved, by consuming ids while it
-- stayed open, passes it: the restore procedure moves the counter with nothing else connected.)
--
-- audit.transaction_counter_behind() asks it; the trigger below asks it before every INSERT
-- statement into the log (a call of audit.append_events is one), and so do `permaudit migrate`
-- and the collector's /readyz for a transaction yet to come.

create function audit.transaction_counter_behind() returns boolean
language plpgsql  -- its plans are kept for the session (a SQL function here was planned per call)
security definer
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
as $$
declare
    newest xid8 := (select max(e.transaction_id) from audit.events e);
begin
    return coalesce(newest >= pg_snapshot_xmax(pg_current_snapshot())
                    and newest is distinct from pg_current_xact_id_if_assigned(), false);
end;
$$;

create function audit.guard_transaction_counter() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if audit.transaction_counter_behind() then
        raise exception using errcode = 'PA004',
            message = format('the cluster''s transaction counter (next id %s) is behind the log (newest %s): '
                             'appended events would be read out of committed order; move the counter past the log '
                             'first (docs/deployment.md, "Restoring a logical dump")',
                             pg_snapshot_xmax(pg_current_snapshot()), (select max(e.transaction_id) from audit.events e));
    end if;
    return null;
end;
$$;

create trigger events_after_the_counter before insert on audit.events
    for each statement execute function audit.guard_transaction_counter();
alter table audit.events enable always trigger events_after_the_counter;

alter function audit.guard_transaction_counter() owner to permaudit_owner;
alter function audit.transaction_counter_behind() owner to permaudit_owner;
revoke execute on function audit.guard_transaction_counter(), audit.transaction_counter_behind() from public;
grant execute on function audit.transaction_counter_behind() to permaudit_writer, permaudit_projector, permaudit_auditor;
