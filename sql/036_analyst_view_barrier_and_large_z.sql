-- 036: from reviews of the analyst's SQL API, the dashboards and the documented reader.
--
-- 1. analytics.permission_state joins the projected states with the link table. As a plain view,
--    a condition the analyst writes could run while the link table is scanned, before the join:
--    a cast that fails (`subject::int = 0`) or a cheap temporary function then sees install ids
--    that have no state (installs that only used the picker), which the view never shows. As a
--    security barrier, the view's join runs first; conditions that cannot leak (plain
--    comparisons) are still pushed down, so a lookup by app or subject keeps its index.
-- 2. analytics.pooled_p_value failed with "value out of range: underflow" for |z| above about 38
--    (PostgreSQL's exp() raises an error where it would return 0), which a large experiment or
--    the demo's primed-vs-unprimed comparison reaches. Beyond |z| = 36.77 (x = 26 below) the
--    p-value is below 1e-294: it is returned as 0.
-- 3. audit.read_committed (004), the documented reader for clients in any language, was
--    executable by its owner only. The roles that may read audit.events (projector, auditor)
--    may now call it; it runs with the caller's privileges.

-- 1.
alter view analytics.permission_state set (security_barrier = true);

-- 2. x = |z| / sqrt(2); erfc(x) by Abramowitz and Stegun 7.1.26, as in 009.
create or replace function analytics.pooled_p_value(successes numeric, trials numeric, baseline_successes numeric, baseline_trials numeric)
returns float8
language sql immutable
as $$
    select case when x > 26 then 0::float8
                else t * exp(-x * x) * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
           end
      from (select x, 1 / (1 + 0.3275911 * x) as t
              from (select abs(p1 - p0) / sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n0)) / sqrt(2::float8) as x
                      from (select successes::float8 / trials as p1, baseline_successes::float8 / baseline_trials as p0,
                                   trials::float8 as n1, baseline_trials::float8 as n0,
                                   (successes + baseline_successes)::float8 / (trials + baseline_trials) as pooled
                             where trials > 0 and baseline_trials > 0) as r
                     where pooled > 0 and pooled < 1) as s) as u;
$$;

-- 3.
grant execute on function audit.read_committed(xid8, bigint, integer) to permaudit_projector, permaudit_auditor;
