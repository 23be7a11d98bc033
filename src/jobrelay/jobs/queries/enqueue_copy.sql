-- Bulk enqueue of jobs without a dedupe key, a delay or a run time (enqueue.py `_copy_new`):
-- COPY (text format), which inserts in batches (heap_multi_insert) and skips the per-row executor
-- work of INSERT ... SELECT. Such jobs cannot conflict, so no arbiter is needed; the caller
-- reads enqueue_paused.sql first in the same transaction. available_at takes its default,
-- the transaction's start (database time, like the clock_timestamp() of enqueue_new.sql).
-- The columns are the fields of jobrelay_job_input_v3 in their order but delay_s and run_at
-- (enqueue_row.py `COPY_NAMES`, which writes the lines); dedupe_key is always NULL here.
COPY jobs (
    id, type, payload, dedupe_key, revision, source_key, concurrency_class, priority,
    max_attempts, parent_id, role, fairness_key, traceparent, workflow_id
) FROM STDIN
