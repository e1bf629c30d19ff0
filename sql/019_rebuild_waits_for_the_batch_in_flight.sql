-- 019: a rebuild waits for a batch in flight instead of deadlocking with it.
--
-- `permaudit project --rebuild` may run while another projector follows the log (it does not take
-- the single-projector lock; readers must never see partial numbers, and they do not: the rebuild
-- is one transaction). Its first step, projection.reset() (009), deleted every count row and
-- only then reset the checkpoint row. A batch of the follower that had already locked the
-- checkpoint row (projection.apply_batch starts with SELECT ... FOR UPDATE) then waited for a
-- count row the rebuild had deleted, while the rebuild waited for the checkpoint row: PostgreSQL
-- reported a deadlock and aborted one of the two. reset() now takes the checkpoint row first, so
-- it queues behind the batch in flight, and the follower's next batch queues behind the rebuild
-- and continues from the rebuilt checkpoint.
--
-- 009's body, with the lock added first. CREATE OR REPLACE keeps the owner and the grants but not
-- 011's security definer and search_path, so they are restated.

create or replace function projection.reset()
returns void
language sql
security definer
set search_path = pg_catalog, pg_temp
as $$
    select from projection.checkpoint c where c.name = 'analytics' for update;
    select projection.reset_counts();
    delete from projection.intake_minutely;
    delete from projection.intake_hourly;
$$;
