-- Relay lag: the oldest batch item still to send (not dispatched, not cancelled, not failed,
-- not deleted) and how many there are, from the partial index batch_item_due_idx (its
-- rows are the backlog only; ids are UUIDv7, so the first id is the oldest item).
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS at
),
oldest AS (
    SELECT bi.id, bi.batch_id, bi.created_at, bi.dispatch_attempts
    FROM batch_item AS bi
    WHERE bi.dispatched_at IS NULL
      AND bi.cancelled_at IS NULL
      AND bi.error_message IS NULL
      AND bi.deleted_at IS NULL
    ORDER BY bi.id
    LIMIT 1
)
SELECT
    (SELECT count(*)
     FROM batch_item AS bi
     WHERE bi.dispatched_at IS NULL
       AND bi.cancelled_at IS NULL
       AND bi.error_message IS NULL
       AND bi.deleted_at IS NULL) AS undispatched,
    o.id AS oldest_item_id,
    o.batch_id AS oldest_batch_id,
    o.created_at AS oldest_created_at,
    o.dispatch_attempts AS oldest_dispatch_attempts,
    extract(EPOCH FROM clock.at - o.created_at)::float8 AS lag_s
FROM clock
LEFT JOIN oldest AS o ON true
