SELECT
    c.relname AS table_name,
    CASE c.relpersistence
        WHEN 'p' THEN 'logged'
        WHEN 'u' THEN 'unlogged'
        WHEN 't' THEN 'temporary'
    END AS persistence
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p')
  AND n.nspname = current_schema()
ORDER BY c.relname
