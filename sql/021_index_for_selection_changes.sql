-- 021: an index for the "limited-never-offered" finding (audit findings, report).
--
-- The finding counts installs whose current state is limited and whose stream has no
-- limitedSelection.changed event triggered by the app. Its NOT EXISTS probed the stream's events
-- through the (stream_key, stream_version) key and read each of them from the table to check the
-- type: at 5,000,000 events it took 1.3-2.6 s of a 2-3 s report (BENCHMARKS.md). A partial index
-- holds only the streams' limitedSelection.changed events, so the probe reads those alone (on a
-- 463,867-event log: 323 ms before, 28 ms after; the index is 48 kB).
--
-- Only events of that type are indexed: the cost for other appends is the predicate check.
create index events_limited_selection_changes on audit.events (stream_key) where type = 'limitedSelection.changed';
comment on index audit.events_limited_selection_changes is
    'limitedSelection.changed events by stream: the limited-never-offered finding probes it per limited install.';
