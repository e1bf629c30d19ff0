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
-- the newest transaction that ended), and the rows a statement sees are committed ones or its own
-- transaction's, whose id may be at or above xmax. So the newest id in sight, unless it is this
-- transaction's, must be below xmax. (Comparing with pg_current_xact_id() would refuse the
-- ordinary case of a transaction that took its id before a later one appended and committed.)
-- One probe of the committed-order index per INSERT statement (a call of audit.append_events is
-- one), never a scan of the log, even where its statistics call it empty (040).

create function audit.guard_transaction_counter() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
set enable_seqscan = off  -- the newest id from the index, whatever the statistics say (040)
as $$
declare
    newest xid8 := (select max(e.transaction_id) from audit.events e);
    next_id xid8 := pg_snapshot_xmax(pg_current_snapshot());
begin
    if newest >= next_id and newest is distinct from pg_current_xact_id_if_assigned() then
        raise exception using errcode = 'PA004',
            message = format('the cluster''s transaction counter (next id %s) is behind the log (newest %s): '
                             'appended events would be read out of committed order; move the counter past the log '
                             'first (docs/deployment.md, "Restoring a logical dump")', next_id, newest);
    end if;
    return null;
end;
$$;

create trigger events_after_the_counter before insert on audit.events
    for each statement execute function audit.guard_transaction_counter();
alter table audit.events enable always trigger events_after_the_counter;

alter function audit.guard_transaction_counter() owner to permaudit_owner;
revoke execute on function audit.guard_transaction_counter() from public;
