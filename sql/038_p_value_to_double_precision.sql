-- 038: analytics.pooled_p_value to double precision.
--
-- 009 took erfc from Abramowitz and Stegun 7.1.26, whose error is up to 1.5e-7 absolute: the
-- analyst's p-value differed from the one `permaudit stats` and `report` print (glibc's erfc) in
-- the seventh decimal, and by 1.5% near p = 1e-19. The contract's p-value is 2(1 - Phi(|z|)) =
-- erfc(x) with x = |z| / sqrt 2, now computed to a relative error below 2e-13:
--   x < 2:  1 - erf(x), with erf(x) = 2/sqrt(pi) exp(-x^2) sum over n of 2^n x^(2n+1) / (1*3*...*(2n+1))
--           (terms all positive, at most 31 of them);
--   x >= 2: exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + (2/2)/(x + (3/2)/(x + ...)))), the continued
--           fraction evaluated from the front (modified Lentz; at most 57 steps).
-- Beyond x = 26 (|z| = 36.77) the p-value is below 1e-294 and is returned as 0, as in 036.
-- NULL where the test is undefined (no trials, or no variance), as before.

create or replace function analytics.pooled_p_value(successes numeric, trials numeric, baseline_successes numeric, baseline_trials numeric)
returns float8
language plpgsql immutable parallel safe
as $$
declare
    p1     float8;
    p0     float8;
    pooled float8;
    x      float8;
    term   float8;
    total  float8;
    f      float8;
    c      float8;
    d      float8;
    delta  float8;
    n      integer := 0;
begin
    if trials is null or baseline_trials is null or trials <= 0 or baseline_trials <= 0 then
        return null;
    end if;
    p1 := successes::float8 / trials;
    p0 := baseline_successes::float8 / baseline_trials;
    pooled := (successes + baseline_successes)::float8 / (trials + baseline_trials);
    if not (pooled > 0 and pooled < 1) then
        return null;
    end if;
    x := abs(p1 - p0) / sqrt(pooled * (1 - pooled) * (1 / trials::float8 + 1 / baseline_trials::float8)) / sqrt(2::float8);
    if x > 26 then
        return 0;
    elsif x < 2 then
        term := x;
        total := x;
        while term > total * 1e-17 loop
            n := n + 1;
            term := term * 2 * x * x / (2 * n + 1);
            total := total + term;
        end loop;
        return 1 - 2 / sqrt(pi()) * exp(-x * x) * total;
    end if;
    f := x;
    c := x;
    d := 0;
    loop
        n := n + 1;
        d := 1 / (x + n / 2.0 * d);
        c := x + n / 2.0 / c;
        delta := c * d;
        f := f * delta;
        exit when abs(delta - 1) < 1e-16;
    end loop;
    return exp(-x * x) / sqrt(pi()) / f;
end;
$$;
