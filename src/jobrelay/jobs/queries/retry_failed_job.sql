-- An operator retries a failed or cancelled job: back to pending with fresh attempts. A
-- finished job moves from `finished_jobs` back into `jobs`; one finished before migration
-- 0017 and not moved yet is updated in place. Fails on jobs_active_dedupe_key when another
-- active job holds the same key now.
WITH revived AS (
    DELETE FROM finished_jobs
    WHERE id = %(id)s
        AND status IN ('failed', 'cancelled')
    RETURNING finished_jobs AS job
),
reinserted AS (
    INSERT INTO jobs
    SELECT pending.*
    FROM revived
    CROSS JOIN LATERAL jsonb_populate_record(
        NULL::jobs,
        to_jsonb(revived.job) || jsonb_build_object(
            'status', 'pending',
            'attempt_count', 0,
            'available_at', clock_timestamp(),
            'updated_at', clock_timestamp(),
            'finished_at', NULL
        )
    ) AS pending
    RETURNING jobs.*
),
in_place AS (
    UPDATE jobs
    SET
        status = 'pending',
        attempt_count = 0,
        available_at = clock_timestamp(),
        finished_at = NULL
    WHERE id = %(id)s
        AND status IN ('failed', 'cancelled')
    RETURNING jobs.*
)
SELECT * FROM reinserted
UNION ALL
SELECT * FROM in_place
