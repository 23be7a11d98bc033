-- A failed, not final attempt: keep the count, make the item due again after a delay.
-- An item locked by another transaction is skipped, not waited for (`deferred`: the relay
-- writes it in a later round; its lease keeps it from being claimed meanwhile). It changes
-- no count, so the batch row is not involved. One row per input id.
WITH s AS (
    SELECT *
    FROM unnest(%(ids)s::text[], %(attempts)s::int[], %(delays)s::float8[])
        AS s (id, attempt, delay_s)
), locked AS MATERIALIZED (
    SELECT bi.id
    FROM batch_item AS bi
    WHERE bi.id IN (SELECT s.id FROM s)
    ORDER BY bi.id
    FOR NO KEY UPDATE SKIP LOCKED
), released AS (
    UPDATE batch_item AS bi
    SET lease_until = clock_timestamp() + make_interval(secs => s.delay_s),
        updated_by = %(actor)s
    FROM s
    WHERE bi.id = s.id
      AND bi.id IN (SELECT l.id FROM locked AS l)
      AND bi.dispatch_attempts = s.attempt
      AND bi.dispatched_at IS NULL
    RETURNING bi.id
)
SELECT s.id,
       s.id IN (SELECT r.id FROM released AS r) AS changed,
       s.id NOT IN (SELECT l.id FROM locked AS l)
           AND EXISTS (SELECT 1 FROM batch_item AS x WHERE x.id = s.id) AS deferred
FROM s
