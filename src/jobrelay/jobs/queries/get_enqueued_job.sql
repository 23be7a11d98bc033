-- The job a single enqueue landed in, read in the enqueue's round trip (queued right after
-- the write in one pipeline, enqueue.py `_write_stored`): the new job by its id, or the
-- active job that holds its dedupe key (deduplicated, merged or superseded). The caller
-- keeps the row whose id the write reported and reads by id in the rare race where the
-- active job changed in between.
SELECT *
FROM jobs
WHERE id = %(id)s
    OR (
        type = %(type)s
        AND dedupe_key = %(dedupe_key)s
        AND status IN ('pending', 'in_progress')
    )
