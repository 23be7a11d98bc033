-- The job types the live workers have handlers for (issue 24; heartbeat newer than three
-- of the worker's own intervals, as the diagnosis counts them). `every_type` is true when a
-- live worker lists none (a worker of a release before migration 0016 claims every type).
SELECT coalesce(array_agg(DISTINCT t.type) FILTER (WHERE t.type IS NOT NULL), '{}') AS types,
       coalesce(bool_or(w.job_types IS NULL), false) AS every_type,
       count(DISTINCT w.worker_id) AS live
FROM worker_heartbeat AS w
LEFT JOIN LATERAL unnest(w.job_types) AS t (type) ON true
WHERE w.heartbeat_at > clock_timestamp() - make_interval(secs => 3 * w.interval_s)
