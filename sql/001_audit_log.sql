-- 001: the append-only event log.
--
-- audit.subject_streams is the link table: it maps an install (app, subject) to a stream key.
-- The log itself never stores the raw subject, so erasing an install means deleting its one link
-- row while every event stays as it was.

create schema audit;
comment on schema audit is 'PermissionAudit: the append-only permission event log';

create table audit.subject_streams (
    stream_key   bigint generated always as identity primary key,
    app          text not null,
    subject      text not null,
    next_version bigint not null default 0 check (next_version >= 0),
    linked_at    timestamptz not null default now(),
    unique (app, subject)
);
comment on table audit.subject_streams is
    'Link table: install (app, subject) -> stream key, and the stream''s next version. Erasure deletes the row.';

create table audit.events (
    position       bigint generated always as identity primary key,
    transaction_id xid8 not null default pg_current_xact_id(),
    event_id       uuid not null unique,
    stream_key     bigint not null,
    stream_version bigint not null check (stream_version >= 0),
    type           text not null,
    occurred_at    timestamptz not null,
    recorded_at    timestamptz not null default now(),
    app            text not null,
    platform       text not null,
    os_major       integer not null,
    app_version    text not null,
    attempt        uuid,
    permission     text,
    flow           text,
    payload        jsonb not null,
    unique (stream_key, stream_version)
);
comment on table audit.events is
    'The log: one row per accepted event, never updated or deleted. payload is the wire-format event without subject.';
comment on column audit.events.transaction_id is
    'The inserting transaction; readers order by (transaction_id, position) below the oldest running transaction.';

-- Readers in committed order.
create index events_committed_order on audit.events (transaction_id, position);

-- Immutability: no UPDATE, DELETE or TRUNCATE, whatever the role, also with
-- session_replication_role = replica (ENABLE ALWAYS).
create function audit.forbid_change() returns trigger
language plpgsql as $$
begin
    raise exception using
        errcode = 'PA010',
        message = format('audit.%s is append-only: %s is not allowed', tg_table_name, tg_op),
        hint = 'Events are added only through audit.append_events(jsonb).';
end;
$$;

create trigger events_append_only
    before update or delete on audit.events
    for each statement execute function audit.forbid_change();
create trigger events_no_truncate
    before truncate on audit.events
    for each statement execute function audit.forbid_change();
alter table audit.events enable always trigger events_append_only;
alter table audit.events enable always trigger events_no_truncate;
