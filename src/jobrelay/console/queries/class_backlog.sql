-- Per concurrency class: running jobs (and how many of them hold a global-cap slot or have
-- an expired lease), available pending jobs and the age of the oldest one (database time;
-- available = pending, available_at reached, not a parent waiting for its children).
-- Cost: the running and pending jobs (partial indexes jobs_lease_idx, jobs_pending_*_idx),
-- never the finished history.
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS at
),
running AS (
    SELECT j.concurrency_class AS cls,
           count(*) AS running,
           count(*) FILTER (WHERE j.class_slot IS NOT NULL) AS holding_slots,
           count(*) FILTER (WHERE j.lease_expires_at <= clock.at) AS lease_expired
    FROM jobs AS j
    CROSS JOIN clock
    WHERE j.status = 'in_progress'
    GROUP BY j.concurrency_class
),
available AS (
    SELECT j.concurrency_class AS cls,
           count(*) AS available,
           min(j.available_at) AS oldest_available_at
    FROM jobs AS j
    CROSS JOIN clock
    WHERE j.status = 'pending'
      AND j.available_at <= clock.at
      AND j.id NOT IN (
          SELECT p.id FROM jobs AS p WHERE p.role = 'parent' AND p.status = 'pending'
      )
    GROUP BY j.concurrency_class
)
SELECT coalesce(r.cls, a.cls) AS cls,
       coalesce(r.running, 0) AS running,
       coalesce(r.holding_slots, 0) AS holding_slots,
       coalesce(r.lease_expired, 0) AS lease_expired,
       coalesce(a.available, 0) AS available,
       a.oldest_available_at,
       extract(EPOCH FROM (SELECT at FROM clock) - a.oldest_available_at)::float8
           AS oldest_available_age_s
FROM running AS r
FULL JOIN available AS a ON a.cls = r.cls
ORDER BY 1
