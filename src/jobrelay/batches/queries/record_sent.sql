-- SQS accepted these messages: record it, unless the claim was lost (another attempt since).
-- Never waits for another transaction's lock: an item it cannot lock at once (held by a
-- webhook, an operator, a report), or whose batch is held FOR UPDATE (the count delta this
-- update appends checks its foreign key with KEY SHARE, which FOR UPDATE blocks), is skipped
-- and reported `deferred`; the relay records it in a later round. One row per input id.
WITH s AS (
    SELECT * FROM unnest(%(ids)s::text[], %(attempts)s::int[]) AS s (id, attempt)
), locked AS MATERIALIZED (
    SELECT bi.id
    FROM batch_item AS bi
    JOIN batch AS b ON b.id = bi.batch_id
    WHERE bi.id IN (SELECT s.id FROM s)
    ORDER BY bi.id
    FOR NO KEY UPDATE OF bi SKIP LOCKED
    FOR KEY SHARE OF b SKIP LOCKED
), recorded AS (
    UPDATE batch_item AS bi
    SET dispatched_at = clock_timestamp(),
        updated_by = %(actor)s
    FROM s
    WHERE bi.id = s.id
      AND bi.id IN (SELECT l.id FROM locked AS l)
      AND bi.dispatch_attempts = s.attempt
      AND bi.dispatched_at IS NULL
    RETURNING bi.id
)
SELECT s.id,
       s.id IN (SELECT r.id FROM recorded AS r) AS changed,
       s.id NOT IN (SELECT l.id FROM locked AS l)
           AND EXISTS (SELECT 1 FROM batch_item AS x WHERE x.id = s.id) AS deferred
FROM s
