#!/bin/sh
# Applies the pending migrations of sql/ with psql alone, as `permaudit migrate` does, for a DBA
# who applies schema changes by hand: each NNN_name.sql in order, once, in one transaction
# together with its row in permaudit.schema_migrations (version NNN, the file name, the SHA-256
# of its text), under the advisory lock `permaudit migrate` takes. A file already recorded is
# skipped if its text is unchanged and stops the script if it changed. Either tool can then
# carry on where the other stopped.
#
# Usage: deploy/migrate-with-psql.sh DATABASE_URL [SQL_DIRECTORY]   (default: the sql/ beside deploy/)
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 DATABASE_URL [SQL_DIRECTORY]" >&2
    exit 64
fi
url=$1
directory=${2:-$(dirname "$0")/../sql}

# The session the migrations are written for, whatever the database's or role's defaults (as
# `permaudit migrate` sets it): names resolve to PostgreSQL's own functions and operators only,
# backslashes in literals are backslashes, the text is UTF-8.
export PGOPTIONS="${PGOPTIONS:-} -c search_path=pg_catalog,pg_temp -c standard_conforming_strings=on"
export PGCLIENTENCODING=UTF8
run_psql() { psql "$url" -X -q -v ON_ERROR_STOP=1 "$@"; }

run_psql <<'SQL'
set client_min_messages = warning;
create schema if not exists permaudit;
create table if not exists permaudit.schema_migrations (
    version    integer primary key,
    name       text not null,
    checksum   text not null,
    applied_at timestamptz not null default now()
);
SQL

applied=0
for file in "$directory"/[0-9]*.sql; do
    [ -e "$file" ] || { echo "no migrations in $directory" >&2; exit 1; }
    name=$(basename "$file")
    digits=${name%%[!0-9]*}
    version=$(echo "$digits" | sed 's/^0*//')
    version=${version:-0}
    checksum=$(sha256sum "$file" | cut -d ' ' -f 1)
    recorded=$(run_psql -At -v version="$version" <<'SQL'
select checksum from permaudit.schema_migrations where version = :'version'::integer;
SQL
)
    if [ -n "$recorded" ]; then
        if [ "$recorded" != "$checksum" ]; then
            echo "$name: already applied but its text has changed since (checksum $recorded recorded, $checksum now); add a new migration instead of editing an applied one" >&2
            exit 1
        fi
        continue
    fi
    # One transaction (-1): the lock, the record (a concurrent run that recorded the file first
    # makes it fail here, before the file runs), the file. Query output is discarded; an error
    # goes to stderr and rolls all of it back.
    run_psql -1 -o /dev/null -v version="$version" -v name="$name" -v checksum="$checksum" \
        -c "select pg_advisory_xact_lock(hashtext('permaudit.migrate'))" \
        -f - -f "$file" <<'SQL'
insert into permaudit.schema_migrations (version, name, checksum) values (:'version'::integer, :'name', :'checksum');
SQL
    echo "applied $name"
    applied=$((applied + 1))
done
echo "$applied applied"
