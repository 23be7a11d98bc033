-- A jobs worker says it is alive, which classes it serves (slots per class, its global
-- caps) and which job types it has handlers for; one row per worker, refreshed every
-- heartbeat interval (database time).
INSERT INTO worker_heartbeat AS w (
    worker_id, classes, class_slots, global_caps, interval_s, job_types
)
VALUES (
    %(worker_id)s, %(classes)s, %(class_slots)s, %(global_caps)s, %(interval_s)s,
    %(job_types)s
)
ON CONFLICT (worker_id) DO UPDATE SET
    classes = excluded.classes,
    class_slots = excluded.class_slots,
    global_caps = excluded.global_caps,
    interval_s = excluded.interval_s,
    job_types = excluded.job_types,
    heartbeat_at = clock_timestamp()
