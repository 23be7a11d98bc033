-- The sessions holding row locks on job %(id)s when several transactions do: xmax is then a
-- MultiXact whose members (with their lock modes) pg_get_multixact_members lists. Raises
-- when xmax is not a MultiXact: run it in a savepoint, after row_lockers.sql found nobody.
SELECT
    a.pid,
    coalesce(nullif(a.application_name, ''), a.usename::text, '') AS application,
    coalesce(a.state, 'unknown') AS state,
    coalesce(a.xact_start, a.backend_start) AS since,
    m.mode
FROM jobs AS j
CROSS JOIN LATERAL pg_get_multixact_members(j.xmax) AS m
JOIN pg_locks AS l
    ON l.locktype = 'transactionid'
    AND l.mode = 'ExclusiveLock'
    AND l.granted
    AND l.transactionid = m.xid
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE j.id = %(id)s
    AND j.xmax <> '0'::xid
    AND a.pid <> pg_backend_pid()
ORDER BY a.pid
