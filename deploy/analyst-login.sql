-- Gives the analyst role (created NOLOGIN by migration 007) LOGIN and a password, for Grafana and
-- analysts' SQL clients. Run after 'permaudit migrate' with the password as a psql variable:
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -v analyst_password="$PERMAUDIT_ANALYST_PASSWORD" -f deploy/analyst-login.sql
--
-- psql quotes the value (:'analyst_password'), so any character is safe; the server stores only
-- its SCRAM hash (password_encryption = scram-sha-256, the default since PostgreSQL 14).
-- Re-running it changes the password. The role still reads schema analytics and nothing else.
-- Without the variable, or with an empty password (which would give LOGIN with no password), it
-- changes nothing and psql exits with status 3, whatever ON_ERROR_STOP the caller set.
\set ON_ERROR_STOP on
\set VERBOSITY terse
\if :{?analyst_password}
\else
    do $$ begin raise exception 'analyst-login.sql: no password: run psql with -v analyst_password=...'; end $$;
\endif
select :'analyst_password' = '' as analyst_password_is_empty \gset
\if :analyst_password_is_empty
    do $$ begin raise exception 'analyst-login.sql: the password is empty: set -v analyst_password=... to a password'; end $$;
\endif
alter role permaudit_analyst login password :'analyst_password';
