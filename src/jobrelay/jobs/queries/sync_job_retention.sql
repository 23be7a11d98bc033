-- The pruner writes its retention settings into job_retention (read by every statement
-- that finishes a job, see migration 0017): the default (type '*') and one row per type
-- given; rows of types no longer given go. NULL retention keeps forever.
WITH wanted AS (
    SELECT type, retention_s
    FROM unnest(%(types)s::text[], %(retention_s)s::bigint[]) AS given (type, retention_s)
),
gone AS (
    DELETE FROM job_retention
    WHERE type NOT IN (SELECT type FROM wanted)
),
written AS (
    INSERT INTO job_retention (type, retention_s)
    SELECT type, retention_s FROM wanted
    ON CONFLICT (type) DO UPDATE
    SET retention_s = EXCLUDED.retention_s, updated_at = clock_timestamp()
    WHERE job_retention.retention_s IS DISTINCT FROM EXCLUDED.retention_s
)
SELECT count(*) AS types FROM wanted
