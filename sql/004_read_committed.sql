-- 004: reading the log in committed order.
--
-- Positions are taken when a row is inserted, but rows become visible when their transaction
-- commits, so a plain "position > last seen" reader can skip a row whose position was taken
-- earlier by a transaction that committed later. Readers instead order by
-- (transaction_id, position) and read only below the oldest transaction still running
-- (pg_snapshot_xmin): everything below it has committed or aborted, so nothing can appear
-- later behind the checkpoint.
--
--   select * from audit.read_committed('0'::xid8, 0, 1000);   -- from the start
--   -- then pass the (transaction_id, position) of the last row as the next checkpoint.

create function audit.read_committed(after_transaction xid8, after_position bigint, max_events integer default 1000)
returns setof audit.events
language sql stable
as $$
    select *
      from audit.events
     where (transaction_id, position) > (after_transaction, after_position)
       and transaction_id < pg_snapshot_xmin(pg_current_snapshot())
     order by transaction_id, position
     limit max_events
$$;

comment on function audit.read_committed(xid8, bigint, integer) is
    'Events after a (transaction_id, position) checkpoint, in committed order, never skipping a late commit.';
