-- Enqueue jobs without a dedupe key (any policy): such a job cannot conflict with another,
-- so this is a plain insert with no arbiter, no read-back and no result rows; the caller
-- knows each id it sent. Nothing is inserted when enqueueing is paused: the caller reads
-- the row count (0 for a paused enqueue, else every input row). The input document has the
-- shape the policy statements read (enqueue_ignore.sql); a new column goes in all four.
INSERT INTO jobs (
    id, type, payload, dedupe_key, revision, source_key, concurrency_class, priority,
    max_attempts, available_at, parent_id, role, fairness_key
)
SELECT
    id, type, payload, dedupe_key, revision, source_key, concurrency_class, priority,
    max_attempts,
    -- a NULL delay: a parent waiting for its children, never claimed (the end of time,
    -- not 'infinity', which Python's datetime cannot hold)
    coalesce(
        run_at,  -- a job asked for at a time (runAt), else now plus the delay
        clock_timestamp() + make_interval(secs => delay_s),
        '9999-12-31 00:00:00+00'
    ),
    parent_id, role, fairness_key
FROM jsonb_to_recordset(%(jobs)s::jsonb) AS t (
    id uuid, type text, payload jsonb, dedupe_key text, revision bigint, source_key text,
    concurrency_class text, priority smallint, max_attempts integer, delay_s float8,
    parent_id uuid, role text, run_at timestamptz, fairness_key text
)
WHERE NOT (SELECT enqueue_paused FROM jobs_control)
