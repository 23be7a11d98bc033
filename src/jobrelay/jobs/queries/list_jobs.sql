-- Newest first, keyset pagination on id (UUIDv7, time ordered): pass the last id seen as
-- %(before)s. Fetches one row more than the page to tell whether another page follows.
SELECT *
FROM jobs
WHERE (%(type)s::text IS NULL OR type = %(type)s::text)
    AND (%(status)s::text IS NULL OR status = %(status)s::text)
    AND (%(before)s::uuid IS NULL OR id < %(before)s::uuid)
ORDER BY id DESC
LIMIT %(limit)s
