-- Enqueue jobs whose type keeps the existing active job on a dedupe conflict (policy ignore).
-- One atomic statement: the ON CONFLICT target repeats the predicate of the partial unique
-- index jobs_active_dedupe_key, so the index is the arbiter (never read-then-insert), and
-- DO NOTHING takes no lock on the active job (enqueue_update.sql's DO UPDATE would).
-- Rows: `inserted` for a new job, `existing` for the active job that already held the key,
-- `paused` when enqueueing is paused. An input missing from the result raced a concurrent
-- change of the active job; the caller runs it again.
WITH control AS (
    SELECT enqueue_paused FROM jobs_control
),
input AS (
    SELECT * FROM jsonb_populate_recordset(NULL::jobrelay_job_input_v3, %(jobs)s::jsonb)
),
written AS (
    INSERT INTO jobs (
        id, type, payload, dedupe_key, revision, source_key, concurrency_class, priority,
        max_attempts, available_at, parent_id, role, fairness_key, traceparent, workflow_id
    )
    SELECT
        id, type, payload, dedupe_key, revision, source_key, concurrency_class, priority,
        max_attempts, jobrelay_job_available_at_v1(run_at, delay_s), parent_id, role,
        fairness_key, traceparent, workflow_id
    FROM input
    WHERE NOT (SELECT enqueue_paused FROM control)
    ON CONFLICT (type, dedupe_key)
        WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'in_progress')
    DO NOTHING
    RETURNING id, type, dedupe_key, revision
)
SELECT id, type, dedupe_key, revision, 'inserted' AS kind
FROM written
UNION ALL
SELECT active.id, active.type, active.dedupe_key, active.revision, 'existing' AS kind
FROM input
JOIN jobs AS active
    ON active.type = input.type
    AND active.dedupe_key = input.dedupe_key
    AND active.status IN ('pending', 'in_progress')
WHERE NOT (SELECT enqueue_paused FROM control)
    AND NOT EXISTS (SELECT 1 FROM written WHERE written.id = input.id)
UNION ALL
SELECT NULL, NULL, NULL, NULL, 'paused' AS kind
FROM control
WHERE enqueue_paused
