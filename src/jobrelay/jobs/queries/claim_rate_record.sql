-- After a claim of rate-limited classes, in its transaction (the rows are still locked by
-- claim_rate_budget): append the claimed jobs' start times (their claimed_at) to their
-- class's window.
UPDATE job_rate_windows AS w
SET
    starts = w.starts || recorded.starts,
    updated_at = clock_timestamp()
FROM (
    SELECT s.cls, array_agg(s.at ORDER BY s.at) AS starts
    FROM unnest(%(classes)s::text[], %(starts)s::timestamptz[]) AS s (cls, at)
    GROUP BY s.cls
) AS recorded
WHERE w.concurrency_class = recorded.cls
