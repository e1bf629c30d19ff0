-- 043: an erasure's reason must not contain the erased install id.
--
-- audit.erasures keeps every erasure for good (append-only, 011), with its reason and without the
-- install id. A reason such as 'erase inst-8f2c41 per ticket 12' kept the id there, in every dump
-- and backup, and after ANALYZE in the planner's statistics of the column: the erasure itself
-- undid what it was for. compliance.md said never to write the id in the reason; now the record
-- refuses it, whoever inserts it.
--
-- A row trigger, checked before the record is written and before audit.erase_subject deletes the
-- link, which is where the install id of the record's stream is still known. The comparison
-- ignores case. Install ids shorter than 6 characters are not looked for: they occur in ordinary
-- words and numbers (an id '42' would refuse 'GDPR request 42', an id 'a' nearly every reason).
-- The message names the rule, not the id. Only the owner writes erasure records (through
-- audit.erase_subject, security definer), so the trigger runs with the owner's rights.

create function audit.guard_erasure_reason() returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    if exists (select 1 from audit.subject_streams s
               where s.stream_key = new.stream_key
                 and length(s.subject) >= 6
                 and strpos(lower(new.reason), lower(s.subject)) > 0) then
        raise exception using errcode = 'PA021',
            message = 'reason: must not contain the install id (the reason is kept for good; name a ticket or a request instead)';
    end if;
    return new;
end;
$$;

create trigger erasures_reason_without_the_install_id before insert on audit.erasures
    for each row execute function audit.guard_erasure_reason();
alter table audit.erasures enable always trigger erasures_reason_without_the_install_id;

alter function audit.guard_erasure_reason() owner to permaudit_owner;
revoke execute on function audit.guard_erasure_reason() from public;
