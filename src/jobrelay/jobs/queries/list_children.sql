-- A parent's children, oldest first (UUIDv7 ids are time ordered), at most %(limit)s; reads
-- jobs_parent_id_idx and finished_jobs_parent_id_idx (`all_jobs`: active and finished).
SELECT *
FROM all_jobs
WHERE parent_id = %(id)s
ORDER BY id
LIMIT %(limit)s
