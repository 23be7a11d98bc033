-- Rows of workers that died without a clean stop, long stale: kept a while so a diagnosis
-- can name the last worker seen for a class, then deleted.
DELETE FROM worker_heartbeat
WHERE heartbeat_at < clock_timestamp() - make_interval(secs => %(keep_s)s)
