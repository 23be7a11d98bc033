-- Enqueue one job without a dedupe key (the most common call: one API request, one job):
-- enqueue_new.sql for a single row, with plain parameters instead of a JSON document to
-- unpack (about a fifth of a one-by-one enqueue's time). Nothing is inserted when
-- enqueueing is paused: the caller reads the row count. The columns are enqueue_new.sql's;
-- a new column goes in both.
INSERT INTO jobs (
    id, type, payload, revision, source_key, concurrency_class, priority, max_attempts,
    available_at, parent_id, role, fairness_key
)
SELECT
    %(id)s, %(type)s, %(payload)s::jsonb, %(revision)s, %(source_key)s, %(concurrency_class)s,
    %(priority)s, %(max_attempts)s,
    coalesce(
        %(run_at)s::timestamptz,
        clock_timestamp() + make_interval(secs => %(delay_s)s::float8),
        '9999-12-31 00:00:00+00'  -- a waiting parent (no delay): never claimed
    ),
    %(parent_id)s, %(role)s, %(fairness_key)s
WHERE NOT (SELECT enqueue_paused FROM jobs_control)
