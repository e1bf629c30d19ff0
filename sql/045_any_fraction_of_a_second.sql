-- 045: occurredAt may have a fraction of any length; integer attributes name their upper bound.
--
-- The contract asks for RFC 3339, whose time-secfrac is "." 1*DIGIT: one digit or more, with no
-- upper bound. The rule walk refused more than 9 digits (2026-03-01T09:15:27.1234567890Z), a
-- limit of our own. PostgreSQL reads any number of digits, and the stored time is cut to the
-- microsecond (audit.occurred_at, 034). The rule walk's 24 h check now reads the time through
-- audit.occurred_at too: a cast refuses a date-time text of more than 128 characters (SQLSTATE
-- 22007), which a fraction of some 110 digits makes. audit.event_is_valid (015) still clears only
-- up to 9 digits and leaves a longer fraction to this rule walk, as it leaves every case it does
-- not clear.
--
-- An integer attribute's message now names its upper bound too: 2147483648 was told "must be an
-- integer >= 0", which it is.
--
-- The rule walk is restated whole (CREATE OR REPLACE needs the body): 018's, with the fraction's
-- check, its time for the 24 h check and those three messages changed, nothing else. CREATE OR REPLACE resets the
-- function's settings, so 041's standard_conforming_strings is set again.

create or replace function audit.event_problem(e jsonb, server_time timestamptz default now())
returns text
language plpgsql stable parallel safe
as $$
declare
    event_type text;
    platform   text;
    perm       text;
    unknown    text;
    ts         text[];
    occurred   timestamptz;
    attrs      jsonb;
    item       record;
    attempt_rule text;   -- required | optional
    perm_rule    text;   -- required | absent
    rendered     text;
    tail         text;
    fraction     integer;
begin
    if jsonb_typeof(e) is distinct from 'object' then
        return 'event: must be a JSON object';
    end if;
    rendered := e::text;
    -- the rendering is never shorter than the compact text: only a long one is measured exactly
    if octet_length(rendered) > 16384 and audit.compact_json_length(e) > 16384 then
        return 'event: must be at most 16 KiB of JSON';
    end if;
    if e - array['eventId', 'type', 'occurredAt', 'app', 'subject', 'platform', 'osVersion', 'appVersion',
                 'attempt', 'permission', 'flow', 'experiments', 'attributes'] <> '{}' then
        -- jsonb keeps keys shorter-first, then bytewise: the first one is the one reported.
        select k into unknown
          from jsonb_object_keys(e - array['eventId', 'type', 'occurredAt', 'app', 'subject', 'platform',
                                           'osVersion', 'appVersion', 'attempt', 'permission', 'flow',
                                           'experiments', 'attributes']) as k
         limit 1;
        return audit.key_in_message(unknown) || ': unknown field';
    end if;
    -- Only a text with 17 or more brackets can nest 17 deep: check the rest exactly.
    if length(rendered) - length(translate(rendered, '{[', '')) > 16
       and jsonb_path_exists(e, 'strict $.**{16} ? (@.type() == "object" || @.type() == "array")') then
        return 'event: nesting deeper than 16 levels';
    end if;

    -- eventId
    if not e ? 'eventId' then return 'eventId: is required'; end if;
    if jsonb_typeof(e->'eventId') <> 'string' then return 'eventId: must be a string'; end if;
    if not audit.is_uuid_text(e->>'eventId') then
        return 'eventId: must be a UUID (8-4-4-4-12 hexadecimal digits)';
    end if;

    -- type
    if not e ? 'type' then return 'type: is required'; end if;
    if jsonb_typeof(e->'type') <> 'string' then return 'type: must be a string'; end if;
    event_type := e->>'type';
    case event_type
        when 'limitedSelection.changed', 'permission.statusObserved', 'settings.opened' then
            attempt_rule := 'optional'; perm_rule := 'required';
        when 'picker.opened', 'picker.completed', 'picker.cancelled' then
            attempt_rule := 'required'; perm_rule := 'absent';
        when 'prePermission.shown', 'prePermission.accepted', 'prePermission.declined',
             'permission.prompted', 'permission.granted', 'permission.limited',
             'permission.denied', 'permission.restricted' then
            attempt_rule := 'required'; perm_rule := 'required';
        else
            return 'type: must be one of the event catalogue types';
    end case;

    -- occurredAt: RFC 3339 with an offset, a real date, at most 24 h ahead of the server
    if not e ? 'occurredAt' then return 'occurredAt: is required'; end if;
    if jsonb_typeof(e->'occurredAt') <> 'string' then return 'occurredAt: must be a string'; end if;
    -- Fixed-position checks (cheaper than a regular expression): date-time, fraction, offset.
    ts := array[e->>'occurredAt'];
    tail := substr(ts[1], 20);
    fraction := length(tail) - length(ltrim(substr(tail, 2), '0123456789')) - 1;
    if translate(substr(ts[1], 1, 19), '0123456789t', '9999999999T') <> '9999-99-99T99:99:99'
       or (left(tail, 1) = '.' and fraction < 1)
       or translate(substr(tail, case when left(tail, 1) = '.' then fraction + 2 else 1 end), '0123456789z', '9999999999Z')
          not in ('Z', '+99:99', '-99:99') then
        return 'occurredAt: must be an RFC 3339 timestamp with an offset, e.g. 2026-10-03T09:15:27.120Z';
    end if;
    ts := array[substr(ts[1], 1, 4), substr(ts[1], 6, 2), substr(ts[1], 9, 2), substr(ts[1], 12, 2),
                substr(ts[1], 15, 2), substr(ts[1], 18, 2), null, null,
                nullif(substr(right(ts[1], 6), 2, 2), ''), nullif(substr(right(ts[1], 6), 5, 2), '')];
    if right(e->>'occurredAt', 1) in ('Z', 'z') then
        ts[9] := null; ts[10] := null;
    end if;
    if ts[1]::int < 1 or ts[2]::int not between 1 and 12 or ts[3]::int < 1
       or ts[3]::int > extract(day from make_date(ts[1]::int, ts[2]::int, 1) + interval '1 month - 1 day')
       or ts[4]::int > 23 or ts[5]::int > 59 or ts[6]::int > 59
       or coalesce(ts[9]::int, 0) > 15 or coalesce(ts[10]::int, 0) > 59 then  -- PostgreSQL stores offsets up to ±15:59
        return 'occurredAt: must be an RFC 3339 timestamp with an offset, e.g. 2026-10-03T09:15:27.120Z';
    end if;
    occurred := audit.occurred_at(e->>'occurredAt');  -- (a cast refuses a text over 128 characters: a long fraction)
    if occurred > server_time + interval '24 hours' then
        return 'occurredAt: must not be more than 24 h after server time';
    end if;

    -- app, subject, platform, osVersion, appVersion
    if not e ? 'app' then return 'app: is required'; end if;
    if jsonb_typeof(e->'app') <> 'string' then return 'app: must be a string'; end if;
    if char_length(e->>'app') not between 1 and 255 then return 'app: must be 1-255 characters'; end if;
    if not audit.is_identifier_text(e->>'app') then return 'app: must match [A-Za-z0-9._-]'; end if;

    if not e ? 'subject' then return 'subject: is required'; end if;
    if jsonb_typeof(e->'subject') <> 'string' then return 'subject: must be a string'; end if;
    if char_length(e->>'subject') not between 1 and 128 then return 'subject: must be 1-128 characters'; end if;
    if strpos(e->>'subject', '@') > 0 and e->>'subject' ~ '^[^@]+@[^@.]+(\.[^@.]+)+$' then
        return 'subject: must be a pseudonymous install id, not an e-mail address';
    end if;

    if not e ? 'platform' then return 'platform: is required'; end if;
    if jsonb_typeof(e->'platform') <> 'string' then return 'platform: must be a string'; end if;
    platform := e->>'platform';
    if platform not in ('ios', 'android') then return 'platform: must be "ios" or "android"'; end if;

    if not e ? 'osVersion' then return 'osVersion: is required'; end if;
    if jsonb_typeof(e->'osVersion') <> 'string' then return 'osVersion: must be a string'; end if;
    if char_length(e->>'osVersion') not between 1 and 64 then return 'osVersion: must be 1-64 characters'; end if;
    if not e->>'osVersion' ~ '^[0-9]{1,9}(\.|$)' then
        return 'osVersion: must match a major version of 1-9 digits, then a dot or the end, e.g. 17.4.1 or 14';
    end if;

    if not e ? 'appVersion' then return 'appVersion: is required'; end if;
    if jsonb_typeof(e->'appVersion') <> 'string' then return 'appVersion: must be a string'; end if;
    if char_length(e->>'appVersion') not between 1 and 64 then return 'appVersion: must be 1-64 characters'; end if;

    -- attempt
    if e ? 'attempt' then
        if jsonb_typeof(e->'attempt') <> 'string' then return 'attempt: must be a string'; end if;
        if not audit.is_uuid_text(e->>'attempt') then
            return 'attempt: must be a UUID (8-4-4-4-12 hexadecimal digits)';
        end if;
    elsif attempt_rule = 'required' then
        return 'attempt: is required for ' || event_type;
    end if;

    -- permission
    if perm_rule = 'absent' then
        if e ? 'permission' then return 'permission: must be absent for ' || event_type; end if;
    else
        if not e ? 'permission' then return 'permission: is required for ' || event_type; end if;
        if jsonb_typeof(e->'permission') <> 'string' then return 'permission: must be a string'; end if;
        perm := e->>'permission';
        if perm not in ('ios.photos.readWrite', 'ios.photos.addOnly', 'android.READ_MEDIA_IMAGES',
                        'android.READ_MEDIA_VIDEO', 'android.READ_MEDIA_VISUAL_USER_SELECTED',
                        'android.READ_EXTERNAL_STORAGE', 'android.WRITE_EXTERNAL_STORAGE') then
            return 'permission: must be one of the permissions of the wire format';
        end if;
        if split_part(perm, '.', 1) <> platform then
            return format('permission: must be a %s.* permission on platform %s', platform, platform);
        end if;
    end if;

    -- flow
    if e ? 'flow' then
        if jsonb_typeof(e->'flow') <> 'string' then return 'flow: must be a string'; end if;
        if char_length(e->>'flow') not between 1 and 64 then return 'flow: must be 1-64 characters'; end if;
        if not audit.is_identifier_text(e->>'flow') then return 'flow: must match [A-Za-z0-9._-]'; end if;
    end if;

    -- experiments: key -> variant, both 1-64 characters
    if e ? 'experiments' then
        if jsonb_typeof(e->'experiments') <> 'object' then return 'experiments: must be an object'; end if;
        for item in select key, value from jsonb_each(e->'experiments')
                     where char_length(key) not between 1 and 64 or jsonb_typeof(value) <> 'string'
                        or char_length(value #>> '{}') not between 1 and 64 loop
            if char_length(item.key) not between 1 and 64 then
                return 'experiments: keys must be 1-64 characters';
            end if;
            if jsonb_typeof(item.value) <> 'string' then
                return 'experiments.' || audit.key_in_message(item.key) || ': must be a string';
            end if;
            if char_length(item.value #>> '{}') not between 1 and 64 then
                return 'experiments.' || audit.key_in_message(item.key) || ': must be 1-64 characters';
            end if;
        end loop;
    end if;

    -- attributes: type-specific fields; unknown keys inside are kept
    if e ? 'attributes' then
        if jsonb_typeof(e->'attributes') <> 'object' then return 'attributes: must be an object'; end if;
        attrs := e->'attributes';
    else
        attrs := '{}';
    end if;
    case event_type
        when 'prePermission.shown' then
            if attrs ? 'screen' and jsonb_typeof(attrs->'screen') <> 'string' then
                return 'attributes.screen: must be a string';
            end if;
        when 'permission.prompted' then
            if attrs ? 'dialogShown' and jsonb_typeof(attrs->'dialogShown') <> 'boolean' then
                return 'attributes.dialogShown: must be a boolean';
            end if;
        when 'permission.denied' then
            if attrs ? 'permanent' and jsonb_typeof(attrs->'permanent') <> 'boolean' then
                return 'attributes.permanent: must be a boolean';
            end if;
        when 'picker.opened' then
            if not attrs ? 'picker' then return 'attributes.picker: is required for picker.opened'; end if;
            if jsonb_typeof(attrs->'picker') <> 'string'
               or attrs->>'picker' not in ('phpicker', 'androidPhotoPicker', 'androidOpenDocument') then
                return 'attributes.picker: must be one of phpicker, androidPhotoPicker, androidOpenDocument';
            end if;
            if attrs ? 'selectionLimit' and not audit.is_integer_at_least(attrs->'selectionLimit', 0) then
                return 'attributes.selectionLimit: must be an integer from 0 to 2147483647';
            end if;
        when 'picker.completed' then
            if not attrs ? 'selectedCount' then return 'attributes.selectedCount: is required for picker.completed'; end if;
            if not audit.is_integer_at_least(attrs->'selectedCount', 1) then
                return 'attributes.selectedCount: must be an integer from 1 to 2147483647';
            end if;
        when 'limitedSelection.changed' then
            if not attrs ? 'trigger' then return 'attributes.trigger: is required for limitedSelection.changed'; end if;
            if jsonb_typeof(attrs->'trigger') <> 'string' or attrs->>'trigger' not in ('app', 'system', 'settings') then
                return 'attributes.trigger: must be one of app, system, settings';
            end if;
            if attrs ? 'selectedCount' and not audit.is_integer_at_least(attrs->'selectedCount', 0) then
                return 'attributes.selectedCount: must be an integer from 0 to 2147483647';
            end if;
        when 'permission.statusObserved' then
            if not attrs ? 'status' then return 'attributes.status: is required for permission.statusObserved'; end if;
            if jsonb_typeof(attrs->'status') <> 'string'
               or attrs->>'status' not in ('notDetermined', 'granted', 'limited', 'denied', 'restricted') then
                return 'attributes.status: must be one of notDetermined, granted, limited, denied, restricted';
            end if;
        else
            null;
    end case;
    return null;
end;
$$;

alter function audit.event_problem(jsonb, timestamptz) set standard_conforming_strings = on;
