SELECT i.indisvalid AS valid, i.indisunique AS is_unique
FROM pg_class AS c
JOIN pg_index AS i ON i.indexrelid = c.oid
WHERE c.relname = 'jobs_active_dedupe_key'
  AND c.relnamespace = current_schema()::regnamespace
