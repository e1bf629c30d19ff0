-- 029: the current version of a stream, for optimistic concurrency. audit.append_events takes an
-- expected_version (the stream version of the stream's last stored event, -1 for none), but the
-- writer role reads no table, and the function's rows carry no version: a writer could learn a
-- stream's version only from the text of a PA003 refusal. audit.stream_version answers it in the
-- caller's snapshot, from the link table and the last event of the stream (two index probes).
-- An erased install has no link: its next event starts a new stream, so its version is -1.

create function audit.stream_version(p_app text, p_subject text)
returns bigint
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
    select coalesce((select e.stream_version
                       from audit.events e
                      where e.stream_key = (select s.stream_key
                                              from audit.subject_streams s
                                             where s.app = p_app and s.subject = p_subject)
                      order by e.stream_version desc
                      limit 1), -1)
$$;
comment on function audit.stream_version(text, text) is
    'The stream version of the last stored event of (app, subject), -1 when it has none: the expected_version of audit.append_events.';

alter function audit.stream_version(text, text) owner to permaudit_owner;
revoke execute on function audit.stream_version(text, text) from public;
grant execute on function audit.stream_version(text, text) to permaudit_writer;
