-- Foreign keys between the table and an UNLOGGED (or temporary) table, in either direction.
SELECT
    con.conname AS constraint_name,
    con.conrelid::regclass::text AS referencing,
    con.confrelid::regclass::text AS referenced
FROM pg_constraint AS con
JOIN pg_class AS src ON src.oid = con.conrelid
JOIN pg_class AS dst ON dst.oid = con.confrelid
WHERE con.contype = 'f'
  AND con.conrelid <> con.confrelid
  AND (
      (con.conrelid = to_regclass(%(table)s) AND dst.relpersistence <> 'p')
      OR (con.confrelid = to_regclass(%(table)s) AND src.relpersistence <> 'p')
  )
ORDER BY con.conname
