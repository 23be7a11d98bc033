-- Enqueue one job without a dedupe key (the most common call: one API request, one job):
-- enqueue_new.sql for a single row, its fields (jobrelay_job_input_v3) as plain parameters
-- instead of a JSON document to unpack (about a fifth of a one-by-one enqueue's time).
-- Nothing is inserted when enqueueing is paused: the caller reads the row count.
INSERT INTO jobs (
    id, type, payload, revision, source_key, concurrency_class, priority, max_attempts,
    available_at, parent_id, role, fairness_key, traceparent, workflow_id
)
SELECT
    %(id)s, %(type)s, %(payload)s::jsonb, %(revision)s, %(source_key)s, %(concurrency_class)s,
    %(priority)s, %(max_attempts)s,
    jobrelay_job_available_at_v1(%(run_at)s::timestamptz, %(delay_s)s::float8),
    %(parent_id)s, %(role)s, %(fairness_key)s, %(traceparent)s, %(workflow_id)s
WHERE NOT (SELECT enqueue_paused FROM jobs_control)
