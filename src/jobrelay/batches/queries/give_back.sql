-- Items claimed by a relay that could not reach the queue (an outage, not the item's
-- fault): the attempt is taken back (dispatch_attempts as before the claim) and the lease
-- ended, so the items are due at once for any relay and no longer count in their
-- organization's window. Guarded by the claimed attempt: a claim taken over meanwhile is
-- left to its new holder. A send that SQS did accept but whose answer was lost is sent again
-- later: delivery stays at least once, with the same body and child id. An item locked by
-- another transaction is skipped, not waited for (`deferred`, given back in a later round).
-- One row per input id.
WITH s AS (
    SELECT * FROM unnest(%(ids)s::text[], %(attempts)s::int[]) AS s (id, attempt)
), locked AS MATERIALIZED (
    SELECT bi.id
    FROM batch_item AS bi
    WHERE bi.id IN (SELECT s.id FROM s)
    ORDER BY bi.id
    FOR NO KEY UPDATE SKIP LOCKED
), returned AS (
    UPDATE batch_item AS bi
    SET dispatch_attempts = bi.dispatch_attempts - 1,
        lease_until = NULL,
        updated_by = %(actor)s
    FROM s
    WHERE bi.id = s.id
      AND bi.id IN (SELECT l.id FROM locked AS l)
      AND bi.dispatch_attempts = s.attempt
      AND bi.dispatched_at IS NULL
    RETURNING bi.id
)
SELECT s.id,
       s.id IN (SELECT r.id FROM returned AS r) AS changed,
       s.id NOT IN (SELECT l.id FROM locked AS l)
           AND EXISTS (SELECT 1 FROM batch_item AS x WHERE x.id = s.id) AS deferred
FROM s
