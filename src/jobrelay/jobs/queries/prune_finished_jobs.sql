-- The pruner: delete finished jobs older than the retention (database time), oldest first,
-- a batch at a time. Only top-level jobs are deleted; children go with their parent
-- (foreign key ON DELETE CASCADE), and a parent with a child still active is kept. The
-- attempt history (job_attempts, no foreign key: jobs may be UNLOGGED on old deployments) of
-- the deleted jobs and of all their descendants is deleted by the same statement.
WITH RECURSIVE doomed AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE finished_at < clock_timestamp() - make_interval(secs => %(retention_s)s)
        AND status IN ('completed', 'failed', 'cancelled')
        AND parent_id IS NULL
        AND NOT EXISTS (
            SELECT 1
            FROM jobs AS child
            WHERE child.parent_id = jobs.id
                AND child.status IN ('pending', 'in_progress')
        )
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
tree (id) AS (
    SELECT id FROM doomed
    UNION ALL
    SELECT child.id
    FROM jobs AS child
    JOIN tree ON child.parent_id = tree.id
),
attempts AS (
    DELETE FROM job_attempts
    USING tree
    WHERE job_attempts.job_id = tree.id
)
DELETE FROM jobs
USING doomed
WHERE jobs.id = doomed.id
RETURNING jobs.id
