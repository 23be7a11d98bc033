-- The last attempt failed (or the last claim expired: the sweep): the item gets its
-- terminal error. Its processing child fails with it in the next statement
-- (`children/queries/fail_batch_children.sql`, same transaction): the count triggers
-- (migration 0012) need a statement to change items or children, not both. Cancelled items
-- are left alone (they are already terminal). An item locked by another transaction, or
-- whose batch is held FOR UPDATE (the count delta's foreign key check), is skipped, not
-- waited for: `deferred`. One row per input id; `job_id` and `error_message` are set on the
-- rows that failed (`changed`).
WITH s AS (
    SELECT *
    FROM unnest(%(ids)s::text[], %(attempts)s::int[], %(errors)s::text[])
        AS s (id, attempt, error)
), locked AS MATERIALIZED (
    SELECT bi.id
    FROM batch_item AS bi
    JOIN batch AS b ON b.id = bi.batch_id
    WHERE bi.id IN (SELECT s.id FROM s)
    ORDER BY bi.id
    FOR NO KEY UPDATE OF bi SKIP LOCKED
    FOR KEY SHARE OF b SKIP LOCKED
), failed AS (
    UPDATE batch_item AS bi
    SET error_message = s.error,
        lease_until = NULL,
        updated_by = %(actor)s
    FROM s
    WHERE bi.id = s.id
      AND bi.id IN (SELECT l.id FROM locked AS l)
      AND bi.dispatch_attempts = s.attempt
      AND bi.dispatched_at IS NULL
      AND bi.error_message IS NULL
      AND bi.cancelled_at IS NULL
    RETURNING bi.id, bi.job_id, bi.error_message
)
SELECT s.id,
       f.job_id,
       f.error_message,
       f.id IS NOT NULL AS changed,
       s.id NOT IN (SELECT l.id FROM locked AS l)
           AND EXISTS (SELECT 1 FROM batch_item AS x WHERE x.id = s.id) AS deferred
FROM s
LEFT JOIN failed AS f ON f.id = s.id
