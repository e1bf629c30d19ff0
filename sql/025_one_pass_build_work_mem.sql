-- 025: the one-pass build holds less memory at once.
--
-- `bench project` now samples the server backend's private memory (RssAnon) while the projector
-- runs. During projection.build_from_log() (022/023) it peaked at 171 MiB with 1,000,000 events
-- and 290 MiB with 5,000,000: the build's statements keep several work areas at once (the
-- fold's sort, the inserted attempts that the count tables read twice, the hash tables of the
-- counts and of the per-install grouping), each allowed 64 MB of work_mem by 022/023 and hash
-- tables twice that (hash_mem_multiplier, 2 in PostgreSQL 15), and past 1M events they are full.
-- Each is now allowed 32 MB, hash tables included; what does not fit spills to temporary files,
-- as the larger logs already did.
--
-- ALTER FUNCTION ... SET replaces the work_mem setting of 022/023 without restating the function.

alter function projection.build_from_log() set work_mem = '32MB';
alter function projection.build_from_log() set hash_mem_multiplier = 1;
