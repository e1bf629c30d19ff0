-- 031: an event nested thousands of levels deep is over the size limit, not a server error.
--
-- 017's audit.compact_json_length walks every value of the event (`$.**`); PostgreSQL's jsonpath
-- walk recurses once per level and stops with SQLSTATE 54001 (stack depth limit exceeded) at
-- about 9,000-12,000 levels, which the JSON parser itself still accepts (it stops at about
-- 14,000). A value at level 8192 sits inside 8192 arrays or objects, each at least two bytes
-- ("[]"), so its event is over 16,384 bytes whatever it holds: such an event is measured by its
-- text, which is never shorter than its compact form, and the rule walk names the size rule as
-- it does for any other event over the limit.

alter function audit.compact_json_length(jsonb) rename to compact_json_length_by_walk;

create function audit.compact_json_length(e jsonb)
returns integer
language sql immutable parallel safe
as $$
    select case when jsonb_path_exists(e, 'strict $.**{8192}') then octet_length(e::text)
                else audit.compact_json_length_by_walk(e)
           end
$$;

alter function audit.compact_json_length(jsonb) owner to permaudit_owner;
revoke execute on function audit.compact_json_length(jsonb) from public;
