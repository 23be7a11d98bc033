-- Pending jobs whose type no worker has served for %(after_s)s seconds, and their parents
-- (issue 24). Workers claim only the types they have handlers for, so such a job would wait
-- for ever; past the grace it is failed instead (`fail_unserved_jobs`: the seed's rule, an
-- unknown type is never success, and its parent still ends). A type counts as served while
-- a worker_heartbeat row that lists it was refreshed within the grace; a recent row without
-- job_types (a worker of a release before migration 0016) serves every type, and then
-- nothing is returned. The job types come from a skip scan of jobs_type_status_idx (one
-- probe per type), the jobs of an unserved type from the same index.
WITH RECURSIVE known_types AS (
    SELECT min(j.type) AS type FROM jobs AS j
    UNION ALL
    SELECT (SELECT min(j.type) FROM jobs AS j WHERE j.type > known_types.type)
    FROM known_types
    WHERE known_types.type IS NOT NULL
),
recent AS (
    SELECT w.job_types
    FROM worker_heartbeat AS w
    WHERE w.heartbeat_at > clock_timestamp() - make_interval(secs => %(after_s)s)
),
unserved AS (
    SELECT known_types.type
    FROM known_types
    WHERE known_types.type IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM recent WHERE recent.job_types IS NULL)
        AND NOT EXISTS (
            SELECT 1 FROM recent WHERE known_types.type = ANY(recent.job_types)
        )
)
SELECT j.id, j.parent_id, j.type
FROM unserved
CROSS JOIN LATERAL (
    SELECT j.id, j.parent_id, j.type
    FROM jobs AS j
    WHERE j.type = unserved.type
        AND j.status = 'pending'
        AND j.role <> 'parent'
        AND j.created_at < clock_timestamp() - make_interval(secs => %(after_s)s)
    ORDER BY j.id
    LIMIT %(limit)s
) AS j
LIMIT %(limit)s
