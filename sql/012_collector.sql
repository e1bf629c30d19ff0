-- 012: API keys of the HTTP collector (permaudit serve).
--
-- A key belongs to one app and may only write that app's events. Only the SHA-256 of a key is
-- stored: the key itself is shown once, when it is created, and cannot be recovered. A revoked
-- key stays listed (with revoked_at) and no longer verifies.

create schema collector;

create table collector.api_keys (
    id         bigint generated always as identity primary key,
    app        text not null check (app ~ '^[A-Za-z0-9._-]{1,255}$'),
    key_hash   bytea not null unique check (length(key_hash) = 32),
    created_at timestamptz not null default now(),
    revoked_at timestamptz
);
comment on table collector.api_keys is
    'API keys of the HTTP collector: the SHA-256 of each key, the app it may write, when it was created and revoked.';

-- A new key for an app: 'pak_' and 64 hex digits (two random UUIDs, 244 random bits).
create function collector.create_key(app text)
returns table (id bigint, key text)
language plpgsql
as $$
declare
    new_key text := 'pak_' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', '');
    new_id bigint;
begin
    insert into collector.api_keys (app, key_hash)
    values (create_key.app, sha256(convert_to(new_key, 'UTF8')))
    returning api_keys.id into new_id;
    return query select new_id, new_key;
end;
$$;
comment on function collector.create_key(text) is
    'Creates an API key for an app; returns its id and the key (the only time the key is visible).';

-- The app of a valid (known, not revoked) key, or NULL.
create function collector.verify_key(key text)
returns text
language sql
stable
as $$
    select app from collector.api_keys
     where key_hash = sha256(convert_to(verify_key.key, 'UTF8')) and revoked_at is null;
$$;
comment on function collector.verify_key(text) is
    'The app of a known, unrevoked API key, else NULL.';

-- Revokes a key by id; true when it was active.
create function collector.revoke_key(key_id bigint)
returns boolean
language sql
as $$
    update collector.api_keys set revoked_at = now()
     where id = revoke_key.key_id and revoked_at is null
    returning true;
$$;
comment on function collector.revoke_key(bigint) is
    'Revokes an API key by id; true when the key was active, NULL when there is no such active key.';
