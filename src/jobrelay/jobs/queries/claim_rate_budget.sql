-- Before claiming jobs of rate-limited classes (issue 17): lock each class's row of
-- job_rate_windows (created on first use with the declared limit, which every claimer
-- rewrites so a changed declaration takes effect), drop the starts older than the period and
-- return how many jobs the class may still start now (`allowed`) and, when none, the time
-- the oldest start in the window ages out (`limited_until`). The row lock is held until the
-- claim commits, so claimers of a class take turns and each sees every start committed
-- before it: a sliding window over recorded start times, across every worker process.
-- A start counts while start >= now - period, so no half-open window [t, t + period) ever
-- holds more than max_starts starts. Rows are locked in class order (no deadlock).
WITH declared AS (
    SELECT d.cls, d.max_starts, d.period_s
    FROM unnest(%(classes)s::text[], %(max_starts)s::integer[], %(period_s)s::float8[])
        AS d (cls, max_starts, period_s)
    ORDER BY d.cls
),
locked AS (
    INSERT INTO job_rate_windows AS w (concurrency_class, max_starts, period_s)
    SELECT declared.cls, declared.max_starts, declared.period_s
    FROM declared
    ON CONFLICT (concurrency_class) DO UPDATE
    SET
        max_starts = excluded.max_starts,
        period_s = excluded.period_s,
        starts = ARRAY(
            SELECT kept.at
            FROM unnest(w.starts) AS kept (at)
            WHERE kept.at >= clock_timestamp() - make_interval(secs => excluded.period_s)
            ORDER BY kept.at
        ),
        updated_at = clock_timestamp()
    RETURNING w.concurrency_class, w.max_starts, w.period_s, w.starts
)
SELECT
    locked.concurrency_class AS cls,
    greatest(locked.max_starts - cardinality(locked.starts), 0) AS allowed,
    CASE
        WHEN cardinality(locked.starts) >= locked.max_starts
            THEN locked.starts[cardinality(locked.starts) - locked.max_starts + 1]
            + make_interval(secs => locked.period_s)
    END AS limited_until
FROM locked
