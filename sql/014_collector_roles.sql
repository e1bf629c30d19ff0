-- 014: the collector's keys under the roles of 011. The collector can run as permaudit_writer:
-- it verifies keys (never reads the hashes) and appends through the write path. Managing keys
-- (`permaudit keys`) stays with the operators (the owner's rights, e.g. the migrating role).

alter schema collector owner to permaudit_owner;
alter table collector.api_keys owner to permaudit_owner;
alter function collector.create_key(text) owner to permaudit_owner;
alter function collector.revoke_key(bigint) owner to permaudit_owner;
alter function collector.verify_key(text) owner to permaudit_owner;
alter function collector.verify_key(text) security definer set search_path = pg_catalog, pg_temp;

revoke all on all tables in schema collector from public;
revoke execute on all functions in schema collector from public;
grant usage on schema collector to permaudit_writer;
grant execute on function collector.verify_key(text) to permaudit_writer;

-- Which migrations are applied: the collector's /readyz and the CLI (on an external database)
-- check it before they work, whatever role they run as.
grant usage on schema permaudit to permaudit_writer, permaudit_projector, permaudit_auditor;
grant select on permaudit.schema_migrations to permaudit_writer, permaudit_projector, permaudit_auditor;
