-- Per concurrency class: the workers whose heartbeat row names it, live (heartbeat newer
-- than three of the worker's own intervals, as the diagnosis counts them) or stale, and the
-- slots of the live ones. worker_heartbeat has one row per worker process.
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS at
)
SELECT c.cls,
       count(*) FILTER (WHERE w.heartbeat_at > clock.at - make_interval(secs => 3 * w.interval_s))
           AS live,
       count(*) FILTER (WHERE w.heartbeat_at <= clock.at - make_interval(secs => 3 * w.interval_s))
           AS stale,
       coalesce(sum((w.class_slots ->> c.cls)::integer) FILTER (
           WHERE w.heartbeat_at > clock.at - make_interval(secs => 3 * w.interval_s)
       ), 0) AS live_slots,
       max(w.heartbeat_at) AS last_heartbeat_at
FROM worker_heartbeat AS w
CROSS JOIN LATERAL unnest(w.classes) AS c (cls)
CROSS JOIN clock
GROUP BY c.cls
ORDER BY c.cls
