-- The session holding back vacuum the most: the oldest backend_xmin (else the oldest open
-- transaction) of the database's other sessions; no row when none holds one.
-- xmin_age is in transactions (age()), xact_age_s in seconds of database time.
SELECT a.pid,
       a.application_name,
       a.usename AS user_name,
       a.state,
       a.xact_start,
       extract(EPOCH FROM clock_timestamp() - a.xact_start)::float8 AS xact_age_s,
       age(a.backend_xmin) AS xmin_age,
       left(a.query, %(query_chars)s) AS query
FROM pg_stat_activity AS a
WHERE a.datname = current_database()
  AND a.pid <> pg_backend_pid()
  AND (a.backend_xmin IS NOT NULL OR a.xact_start IS NOT NULL)
ORDER BY age(a.backend_xmin) DESC NULLS LAST, a.xact_start NULLS LAST
LIMIT 1
