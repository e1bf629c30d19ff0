-- 041: the server functions read their backslashes the same in every caller's session.
--
-- PostgreSQL parses a function's body as it runs, in the caller's session, so a caller with
-- standard_conforming_strings = off (a database or role default some older applications set)
-- read '\.' in a pattern as '.' and '\x00' as a NUL byte. A reviewer saw the write path refuse
-- valid events whose occurredAt had more than 6 fraction digits (audit.occurred_at's pattern),
-- let an osVersion of '17x4' past the check to fail on a cast instead of with PA001, and
-- audit.add_seal fail with "invalid byte sequence for encoding UTF8: 0x00". The permaudit tools
-- set the setting on for their own sessions (Connection.sessionSettings); these functions now
-- set it for their own calls, for every other caller. The functions they call (audit.event_is_valid,
-- audit.occurred_at, audit.key_in_message) run inside them.

alter function audit.append_events(jsonb, bigint) set standard_conforming_strings = on;
alter function audit.event_problem(jsonb, timestamptz) set standard_conforming_strings = on;
alter function audit.add_seal(bigint, xid8, bigint, xid8, bigint, bigint, bytea, bytea, bytea, timestamptz, text, bytea, bytea)
    set standard_conforming_strings = on;
