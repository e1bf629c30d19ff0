-- Gives the analyst role (created NOLOGIN by migration 007) LOGIN and a password, for Grafana and
-- analysts' SQL clients. Run after 'permaudit migrate' with the password as a psql variable:
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -v analyst_password="$PERMAUDIT_ANALYST_PASSWORD" -f deploy/analyst-login.sql
--
-- psql quotes the value (:'analyst_password'), so any character is safe; the server stores only
-- its SCRAM hash (password_encryption = scram-sha-256, the default since PostgreSQL 14).
-- Re-running it changes the password. The role still reads schema analytics and nothing else.
\if :{?analyst_password}
\else
    \echo 'analyst-login.sql: set the password with -v analyst_password=...'
    \quit
\endif
alter role permaudit_analyst login password :'analyst_password';
