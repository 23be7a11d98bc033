-- Cancel a duplicate active job found by the reconciliation: it leaves `jobs` for
-- `finished_jobs` in the same statement, like every job that ends.
WITH cancelled AS (
    DELETE FROM jobs
    WHERE id = %(id)s
        AND status IN ('pending', 'in_progress')
    RETURNING jobs AS job
)
INSERT INTO finished_jobs
SELECT finished.*
FROM cancelled
CROSS JOIN LATERAL jobrelay_finished_job_v1(
    cancelled.job,
    jsonb_build_object(
        'status', 'cancelled', 'failure_kind', 'cancelled', 'last_error', %(reason)s::text,
        'class_slot', NULL
    )
) AS finished
