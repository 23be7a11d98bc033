-- The sessions holding a row lock on job %(id)s when one transaction does (issue 40): the
-- live row's xmax is the locking (or updating) transaction, whose own ExclusiveLock on its
-- transaction id names its backend. Empty when nobody holds it, or when xmax is a
-- MultiXact (several lockers: see row_lockers_multi.sql).
SELECT
    a.pid,
    coalesce(nullif(a.application_name, ''), a.usename::text, '') AS application,
    coalesce(a.state, 'unknown') AS state,
    coalesce(a.xact_start, a.backend_start) AS since,
    NULL::text AS mode
FROM jobs AS j
JOIN pg_locks AS l
    ON l.locktype = 'transactionid'
    AND l.mode = 'ExclusiveLock'
    AND l.granted
    AND l.transactionid = j.xmax
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE j.id = %(id)s
    AND j.xmax <> '0'::xid
    AND a.pid <> pg_backend_pid()
ORDER BY a.pid
