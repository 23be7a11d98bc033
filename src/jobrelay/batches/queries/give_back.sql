-- Items claimed by a relay that could not reach the queue (an outage, not the item's
-- fault): the attempt is taken back (dispatch_attempts as before the claim) and the lease
-- ended, so the items are due at once for any relay and no longer count in their
-- organization's window. Guarded by the claimed attempt: a claim taken over meanwhile is
-- left to its new holder. A send that SQS did accept but whose answer was lost is sent again
-- later: delivery stays at least once, with the same body and child id.
UPDATE batch_item AS bi
SET dispatch_attempts = bi.dispatch_attempts - 1,
    lease_until = NULL,
    updated_by = %(actor)s
FROM unnest(%(ids)s::text[], %(attempts)s::int[]) AS s (id, attempt)
WHERE bi.id = s.id
  AND bi.dispatch_attempts = s.attempt
  AND bi.dispatched_at IS NULL
