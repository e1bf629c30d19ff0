-- 005: projection state, maintained incrementally from the log by projection.apply_batch().
--
-- projection.attempts holds each attempt's state as the domain defines it (section 4) over all
-- of its events seen so far: the earliest event (day and base dimensions), the earliest event
-- carrying each optional dimension, the last outcome, and which event types it contains. Every
-- choice is a minimum or maximum by (occurred_at, position), so the state does not depend on
-- the order events arrive in. The *_daily tables hold counts: when an attempt's state changes,
-- its old contribution is subtracted and its new one added.

create schema projection;
comment on schema projection is 'PermissionAudit: projection state (internal; analysts read schema analytics)';

create table projection.checkpoint (
    name             text primary key,
    transaction_id   xid8 not null default '0',
    position         bigint not null default 0,
    events_projected bigint not null default 0,
    updated_at       timestamptz not null default now()
);
insert into projection.checkpoint (name) values ('analytics');

create table projection.attempts (
    app              text not null,
    attempt          uuid not null,
    stream_key       bigint not null,
    first_at         timestamptz not null,   -- earliest event: the attempt's day and base dimensions
    first_pos        bigint not null,
    platform         text not null,
    os_major         integer not null,
    app_version      text not null,
    permission       text,                   -- from the earliest event that has one
    permission_at    timestamptz,
    permission_pos   bigint,
    flow             text,
    flow_at          timestamptz,
    flow_pos         bigint,
    experiments      jsonb,
    experiments_at   timestamptz,
    experiments_pos  bigint,
    outcome          text,                   -- granted | limited | denied | restricted, the last one
    outcome_at       timestamptz,
    outcome_pos      bigint,
    outcome_permanent boolean not null default false,
    prompted_dialog  boolean not null default false,  -- permission.prompted with dialogShown not false
    prompted_any     boolean not null default false,  -- any permission.prompted
    pre_shown        boolean not null default false,
    pre_accepted     boolean not null default false,
    pre_declined     boolean not null default false,
    picker_opened    boolean not null default false,
    picker_completed boolean not null default false,
    primary key (app, attempt)
);

create table projection.outcomes_daily (
    day              date not null,
    app              text not null,
    platform         text not null,
    os_major         integer not null,
    app_version      text not null,
    permission       text,
    flow             text,
    prompted         bigint not null default 0,
    granted          bigint not null default 0,
    limited          bigint not null default 0,
    denied           bigint not null default 0,
    denied_permanent bigint not null default 0,
    restricted       bigint not null default 0,
    unique nulls not distinct (day, app, platform, os_major, app_version, permission, flow)
);

create table projection.priming_daily (
    day         date not null,
    app         text not null,
    platform    text not null,
    permission  text,
    arm         text not null check (arm in ('primed', 'unprimed')),
    attempts    bigint not null default 0,
    accepted    bigint not null default 0,
    declined    bigint not null default 0,
    prompted    bigint not null default 0,
    granted     bigint not null default 0,
    limited     bigint not null default 0,
    denied      bigint not null default 0,
    denied_at_dialog bigint not null default 0,  -- denied attempts in which a dialog was shown
    unique nulls not distinct (day, app, platform, permission, arm)
);

create table projection.experiments_daily (
    day         date not null,
    app         text not null,
    experiment  text not null,
    variant     text not null,
    attempts    bigint not null default 0,
    prompted    bigint not null default 0,
    granted     bigint not null default 0,
    limited     bigint not null default 0,
    denied      bigint not null default 0,
    denied_at_dialog bigint not null default 0,
    unique (day, app, experiment, variant)
);

create table projection.picker_daily (
    day                 date not null,
    app                 text not null,
    platform            text not null,
    flow                text,
    picker_attempts     bigint not null default 0,
    picker_completed    bigint not null default 0,
    permission_attempts bigint not null default 0,
    full_access         bigint not null default 0,
    limited_access      bigint not null default 0,
    unique nulls not distinct (day, app, platform, flow)
);

create table projection.permission_state (
    app         text not null,
    stream_key  bigint not null,
    permission  text not null,
    state       text not null default 'notDetermined',
    since       timestamptz,
    state_pos   bigint,
    primary key (app, stream_key, permission)
);
