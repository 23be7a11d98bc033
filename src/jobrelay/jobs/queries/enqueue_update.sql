-- Enqueue jobs whose type updates the existing active job on a dedupe conflict, in this one
-- statement under the row lock ON CONFLICT takes (pending or running; a running worker then
-- cannot complete it and the job runs again):
-- * policy merge (%(merge_field)s set): the list at that field of the new payload is
--   unioned into the active job's list and its revision bumped; missing or null lists count
--   as empty; when the active list already holds every element nothing changes.
-- * policy supersede (%(merge_field)s NULL): a higher revision replaces payload, revision,
--   source and fairness key; a lower or equal revision leaves the job alone.
-- The WHERE after DO UPDATE filters; the one before it only names the arbiter index.
-- Rows: `inserted` (new job), `updated` (merged or superseded), `existing` (kept), `paused`.
WITH control AS (
    SELECT enqueue_paused FROM jobs_control
),
input AS (
    SELECT * FROM jsonb_populate_recordset(NULL::jobrelay_job_input_v3, %(jobs)s::jsonb)
),
written AS (
    INSERT INTO jobs AS j (
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
    DO UPDATE SET
        payload = CASE
            WHEN %(merge_field)s::text IS NULL THEN excluded.payload
            ELSE jsonb_set(
                j.payload,
                ARRAY[%(merge_field)s::text],
                (
                    SELECT coalesce(jsonb_agg(DISTINCT element ORDER BY element), '[]'::jsonb)
                    FROM (
                        SELECT jsonb_array_elements(
                            jobrelay_job_list_v1(j.payload, %(merge_field)s::text)
                        ) AS element
                        UNION
                        SELECT jsonb_array_elements(
                            jobrelay_job_list_v1(excluded.payload, %(merge_field)s::text)
                        )
                    ) AS merged
                )
            )
        END,
        revision = CASE
            WHEN %(merge_field)s::text IS NULL THEN excluded.revision
            ELSE j.revision + 1
        END,
        source_key = CASE
            WHEN %(merge_field)s::text IS NULL THEN excluded.source_key
            ELSE j.source_key
        END,
        fairness_key = CASE
            WHEN %(merge_field)s::text IS NULL THEN excluded.fairness_key
            ELSE j.fairness_key
        END
    WHERE CASE
        WHEN %(merge_field)s::text IS NULL THEN excluded.revision > j.revision
        ELSE NOT jobrelay_job_list_v1(j.payload, %(merge_field)s::text)
            @> jobrelay_job_list_v1(excluded.payload, %(merge_field)s::text)
    END
    RETURNING j.id, j.type, j.dedupe_key, j.revision, (j.xmax = 0) AS inserted
)
SELECT id, type, dedupe_key, revision,
    CASE WHEN inserted THEN 'inserted' ELSE 'updated' END AS kind
FROM written
UNION ALL
SELECT active.id, active.type, active.dedupe_key, active.revision, 'existing' AS kind
FROM input
JOIN jobs AS active
    ON active.type = input.type
    AND active.dedupe_key = input.dedupe_key
    AND active.status IN ('pending', 'in_progress')
WHERE NOT (SELECT enqueue_paused FROM control)
    AND NOT EXISTS (
        SELECT 1 FROM written
        WHERE written.type = input.type AND written.dedupe_key = input.dedupe_key
    )
UNION ALL
SELECT NULL, NULL, NULL, NULL, 'paused' AS kind
FROM control
WHERE enqueue_paused
