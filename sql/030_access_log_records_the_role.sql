-- 030: the access record names the role the caller acted as.
--
-- audit.access_log has role_name and login_name, but audit.record_access (011) and
-- audit.subject_events (024) run as their owner (security definer), where current_user is
-- permaudit_owner; both wrote session_user, the login, into role_name too. A person who logs in
-- as herself and takes the auditor role with SET ROLE (or the libpq option role=...) was recorded
-- without it. The role chosen with SET ROLE is the setting 'role', which a security definer call
-- does not change: this trigger records it in role_name ('none' = no SET ROLE: the login).
-- It fires for rows inserted here, not for rows a logical replica applies (they keep theirs).

create function audit.access_log_role()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    new.role_name := coalesce(nullif(current_setting('role', true), 'none'), session_user);
    return new;
end;
$$;

create trigger access_log_role before insert on audit.access_log
    for each row execute function audit.access_log_role();

alter function audit.access_log_role() owner to permaudit_owner;
revoke execute on function audit.access_log_role() from public;
