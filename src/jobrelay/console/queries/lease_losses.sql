-- Lease losses of the last hour, derived from the jobs themselves (no counter is kept):
-- jobs failed for good with failure_kind lease_expired (read from finished_jobs_finished_at_idx;
-- one finished before migration 0017 and not moved yet is not counted),
-- and jobs rescued back to pending by the lease sweep and not yet reclaimed (the sweep sets
-- failure_kind lease_expired and available_at to the rescue time).
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS at
)
SELECT
    (SELECT count(*)
     FROM finished_jobs AS j
     WHERE j.finished_at > clock.at - make_interval(mins => 60)
       AND j.status = 'failed'
       AND j.failure_kind = 'lease_expired') AS failed_last_hour,
    (SELECT count(*)
     FROM jobs AS j
     WHERE j.status = 'pending'
       AND j.failure_kind = 'lease_expired'
       AND j.available_at > clock.at - make_interval(mins => 60)) AS rescued_pending_last_hour,
    (SELECT count(*)
     FROM jobs AS j
     WHERE j.status = 'in_progress'
       AND j.lease_expires_at <= clock.at) AS expired_not_yet_rescued
FROM clock
