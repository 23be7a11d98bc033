-- Enqueue jobs without a dedupe key (any policy): such a job cannot conflict with another,
-- so this is a plain insert with no arbiter, no read-back and no result rows; the caller
-- knows each id it sent. Nothing is inserted when enqueueing is paused: the caller reads
-- the row count (0 for a paused enqueue, else every input row). The document's rows are
-- jobrelay_job_input_v3 (migration 0020), as every enqueue statement reads them.
INSERT INTO jobs (
    id, type, payload, dedupe_key, revision, source_key, concurrency_class, priority,
    max_attempts, available_at, parent_id, role, fairness_key, traceparent, workflow_id
)
SELECT
    id, type, payload, dedupe_key, revision, source_key, concurrency_class, priority,
    max_attempts, jobrelay_job_available_at_v1(run_at, delay_s), parent_id, role, fairness_key,
    traceparent, workflow_id
FROM jsonb_populate_recordset(NULL::jobrelay_job_input_v3, %(jobs)s::jsonb)
WHERE NOT (SELECT enqueue_paused FROM jobs_control)
