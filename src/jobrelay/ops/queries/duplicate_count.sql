SELECT count(*) AS duplicates
FROM (
    SELECT type, dedupe_key
    FROM jobs
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'in_progress')
    GROUP BY type, dedupe_key
    HAVING count(*) > 1
) AS groups
