-- Newest first, keyset pagination on id (UUIDv7, time ordered): pass the last id seen as
-- %(before)s. Fetches one row more than the page to tell whether another page follows.
-- Every filter is optional (NULL: not applied). Run unprepared (a custom plan per call), so
-- the planner drops the filters not given and picks the index of those given: the primary
-- key backwards, jobs_type_status_idx, jobs_source_key_idx, jobs_dedupe_key_idx,
-- jobs_finished_at_idx. %(id_floor)s / %(id_ceiling)s bound the id scan from the created
-- range (UUIDv7 ids carry their creation time; the caller widens the range by a margin,
-- the exact created_at test stays).
SELECT *
FROM all_jobs
WHERE (%(type)s::text IS NULL OR type = %(type)s::text)
    AND (%(status)s::text IS NULL OR status = %(status)s::text)
    AND (%(class)s::text IS NULL OR concurrency_class = %(class)s::text)
    AND (%(source_key)s::text IS NULL OR source_key = %(source_key)s::text)
    AND (%(dedupe_key)s::text IS NULL OR dedupe_key = %(dedupe_key)s::text)
    AND (%(created_from)s::timestamptz IS NULL OR created_at >= %(created_from)s::timestamptz)
    AND (%(created_to)s::timestamptz IS NULL OR created_at < %(created_to)s::timestamptz)
    AND (%(finished_from)s::timestamptz IS NULL OR finished_at >= %(finished_from)s::timestamptz)
    AND (%(finished_to)s::timestamptz IS NULL OR finished_at < %(finished_to)s::timestamptz)
    AND (%(id_floor)s::uuid IS NULL OR id >= %(id_floor)s::uuid)
    AND (%(id_ceiling)s::uuid IS NULL OR id < %(id_ceiling)s::uuid)
    AND (%(before)s::uuid IS NULL OR id < %(before)s::uuid)
ORDER BY id DESC
LIMIT %(limit)s
