-- Move jobs finished in place (before migration 0017, or by a process of an earlier
-- release during a rolling deploy) from `jobs` to `finished_jobs`, oldest first, a batch
-- per statement: every column kept, the purge day from job_retention. Readers see each job
-- in exactly one of the two tables (`all_jobs`) before, during and after. Resumable: an
-- interrupted batch rolls back whole.
WITH batch AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE finished_at IS NOT NULL
        AND status IN ('completed', 'failed', 'cancelled')
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
moved AS (
    DELETE FROM jobs
    USING batch
    WHERE jobs.id = batch.id
    RETURNING jobs AS job
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM moved
    CROSS JOIN LATERAL jobrelay_finished_job_v1(moved.job, '{}') AS finished
    RETURNING 1
)
SELECT count(*) AS jobs FROM archived
