-- Enqueue jobs whose type merges into the existing active job (policy merge): the list at
-- %(merge_field)s of the new payload is unioned into the active job's list and its revision
-- is bumped, in this one statement under the row lock ON CONFLICT takes. Missing or null
-- lists count as empty. When the active list already holds every element nothing changes
-- (the WHERE after DO UPDATE filters; the WHERE before it only names the arbiter index).
-- Rows: `inserted` (new job), `updated` (merged), `existing` (nothing new), `paused`.
WITH control AS (
    SELECT enqueue_paused FROM jobs_control
),
input AS (
    SELECT *
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS t (
        id uuid, type text, payload jsonb, dedupe_key text, revision bigint, source_key text,
        concurrency_class text, priority smallint, max_attempts integer, delay_s float8,
        parent_id uuid, role text,
        run_at timestamptz, fairness_key text
    )
),
written AS (
    INSERT INTO jobs AS j (
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
    FROM input
    WHERE NOT (SELECT enqueue_paused FROM control)
    ON CONFLICT (type, dedupe_key)
        WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'in_progress')
    DO UPDATE SET
        payload = jsonb_set(
            j.payload,
            ARRAY[%(merge_field)s::text],
            (
                SELECT coalesce(jsonb_agg(DISTINCT element ORDER BY element), '[]'::jsonb)
                FROM (
                    SELECT jsonb_array_elements(
                        CASE jsonb_typeof(j.payload -> %(merge_field)s::text)
                            WHEN 'array' THEN (j.payload -> %(merge_field)s::text)
                            ELSE '[]'::jsonb
                        END
                    ) AS element
                    UNION
                    SELECT jsonb_array_elements(
                        CASE jsonb_typeof(excluded.payload -> %(merge_field)s::text)
                            WHEN 'array' THEN (excluded.payload -> %(merge_field)s::text)
                            ELSE '[]'::jsonb
                        END
                    )
                ) AS merged
            )
        ),
        revision = j.revision + 1
    WHERE NOT (
        CASE jsonb_typeof(j.payload -> %(merge_field)s::text)
            WHEN 'array' THEN (j.payload -> %(merge_field)s::text)
            ELSE '[]'::jsonb
        END
        @>
        CASE jsonb_typeof(excluded.payload -> %(merge_field)s::text)
            WHEN 'array' THEN (excluded.payload -> %(merge_field)s::text)
            ELSE '[]'::jsonb
        END
    )
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
