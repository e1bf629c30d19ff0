-- 046: the seal chain can change keys: a key hands the chain over to the next one.
--
-- 011's chain was sealed by one key for good: a key due for rotation (a policy's yearly change,
-- an operator leaving, a suspicion) could not be replaced, and a new key could only start a chain
-- that verify would report as signed by another key. A handover is a record of the chain, signed
-- by the key that signed its last seal, that names the next key in full (its raw Ed25519 public
-- key, 32 bytes) and is bound to that seal's hash; the seals after it are signed by the next key.
-- `permaudit audit verify` trusts one key, the chain's first, and each later key through the
-- handover its predecessor signed; by default the chain must also pass through the key
-- directory's retired keys and end with its current key (docs/compliance.md, "Changing keys").
-- The signed message:
--
--     permaudit-key-handover-v1
--     after_seal=<seal id>
--     seal_hash=<that seal's seal_hash, 64 hex digits>
--     from_key=<fingerprint of the key that signs this, 64 hex digits>
--     to_key=<hex of the next key's raw public key, 64 hex digits>
--     handed_over_at=<microseconds since 1970, UTC>
--
-- One handover per seal at most, and only after the chain's last seal, by the key that signed it
-- (a second change of key waits for a seal by the first new key). Like the seals, the records are
-- append-only and added through one function. Changing keys is the auditor's (and the owner's):
-- the projector, which seals, may read the handovers but not add one (nor record one in
-- audit.access_log, 035).

create table audit.key_handovers (
    after_seal_id        bigint primary key references audit.seals (seal_id),
    from_key_fingerprint text not null,
    to_public_key        bytea not null check (length(to_public_key) = 32),
    handed_over_at       timestamptz not null,
    signature            bytea not null check (length(signature) = 64)
);
comment on table audit.key_handovers is
    'Changes of the seal key: after a seal, its key hands the chain to the next key (docs/compliance.md).';
alter table audit.key_handovers owner to permaudit_owner;

create trigger key_handovers_append_only before update or delete on audit.key_handovers
    for each statement execute function audit.forbid_change();
create trigger key_handovers_no_truncate before truncate on audit.key_handovers
    for each statement execute function audit.forbid_change();
alter table audit.key_handovers enable always trigger key_handovers_append_only;
alter table audit.key_handovers enable always trigger key_handovers_no_truncate;

create function audit.add_key_handover(
    p_after_seal_id bigint, p_from_key_fingerprint text, p_to_public_key bytea, p_handed_over_at timestamptz, p_signature bytea)
returns void
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
set standard_conforming_strings = on
as $$
declare
    head record;
begin
    perform pg_advisory_xact_lock(hashtext('permaudit.seal'));
    select s.seal_id, s.key_fingerprint into head from audit.seals s order by s.seal_id desc limit 1;
    if head.seal_id is distinct from p_after_seal_id then
        raise exception using errcode = 'PA022', message = 'a key handover follows the chain''s last seal (another sealer ran first?)';
    end if;
    if exists (select from audit.key_handovers h where h.after_seal_id = p_after_seal_id) then
        raise exception using errcode = 'PA022', message = format('the chain was handed over to another key after seal %s already; seal with that key first', p_after_seal_id);
    end if;
    if head.key_fingerprint <> p_from_key_fingerprint then
        raise exception using errcode = 'PA022', message = format('seal %s was signed by another key than the one handing over', p_after_seal_id);
    end if;
    if encode(sha256(p_to_public_key), 'hex') = p_from_key_fingerprint then
        raise exception using errcode = 'PA022', message = 'a key handover must name a new key, not the one that hands over';
    end if;
    insert into audit.key_handovers values (p_after_seal_id, p_from_key_fingerprint, p_to_public_key, p_handed_over_at, p_signature);
end;
$$;
alter function audit.add_key_handover(bigint, text, bytea, timestamptz, bytea) owner to permaudit_owner;

revoke all on audit.key_handovers from public;
revoke execute on function audit.add_key_handover(bigint, text, bytea, timestamptz, bytea) from public;
grant select on audit.key_handovers to permaudit_projector, permaudit_auditor;
grant execute on function audit.add_key_handover(bigint, text, bytea, timestamptz, bytea) to permaudit_auditor;

-- The refusal of a change names how rows are added (027's hint, with the new table).
create or replace function audit.forbid_change() returns trigger
language plpgsql as $$
begin
    raise exception using
        errcode = 'PA010',
        message = format('audit.%s is append-only: %s is not allowed', tg_table_name, tg_op),
        hint = case tg_table_name
                   when 'events' then 'Events are added only through audit.append_events(jsonb).'
                   when 'seals' then 'Seals are added only through audit.add_seal.'
                   when 'key_handovers' then 'Key handovers are added only through audit.add_key_handover.'
                   when 'erasures' then 'Erasures are recorded only by audit.erase_subject.'
                   when 'access_log' then 'Access records are added only by audit.subject_events and audit.record_access.'
               end;
end;
$$;
