-- Tuples, (auto)vacuum and (auto)analyze times and total size (with indexes and TOAST) of
-- the named tables of the current schema; one row per table that exists.
SELECT s.relname AS table_name,
       s.n_live_tup AS live_tuples,
       s.n_dead_tup AS dead_tuples,
       s.last_vacuum,
       s.last_autovacuum,
       s.last_analyze,
       s.last_autoanalyze,
       pg_total_relation_size(s.relid) AS total_bytes
FROM pg_stat_user_tables AS s
WHERE s.schemaname = current_schema()
  AND s.relname = ANY(%(tables)s::text[])
ORDER BY s.relname
