-- Persistence and sizes of a table, its indexes and its TOAST table (with the TOAST index).
SELECT
    c.oid::regclass::text AS table_name,
    c.relpersistence AS persistence,
    pg_table_size(c.oid) AS table_bytes,
    pg_indexes_size(c.oid) AS index_bytes,
    coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0) AS toast_bytes,
    (SELECT jsonb_object_agg(ic.relname,
                             jsonb_build_object('persistence', ic.relpersistence,
                                                'valid', ix.indisvalid))
     FROM pg_index AS ix JOIN pg_class AS ic ON ic.oid = ix.indexrelid
     WHERE ix.indrelid = c.oid) AS indexes,
    (SELECT jsonb_build_object('name', t.relname, 'persistence', t.relpersistence)
     FROM pg_class AS t WHERE t.oid = NULLIF(c.reltoastrelid, 0)) AS toast,
    (SELECT jsonb_object_agg(ti.relname, ti.relpersistence)
     FROM pg_index AS tx JOIN pg_class AS ti ON ti.oid = tx.indexrelid
     WHERE tx.indrelid = NULLIF(c.reltoastrelid, 0)) AS toast_indexes
FROM pg_class AS c
WHERE c.oid = to_regclass(%(table)s)
