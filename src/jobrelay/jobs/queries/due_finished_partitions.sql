-- Partitions of finished_jobs whose purge day is over (UTC): every job in them is past its
-- retention. Oldest first.
SELECT child.relname AS name
FROM pg_inherits AS link
JOIN pg_class AS child ON child.oid = link.inhrelid
WHERE link.inhparent = 'finished_jobs'::regclass
    AND child.relname ~ '^finished_jobs_p[0-9]{8}$'
    AND to_date(substr(child.relname, 16), 'YYYYMMDD')
        < (clock_timestamp() AT TIME ZONE 'UTC')::date
ORDER BY child.relname
