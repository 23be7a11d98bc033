-- The last attempt failed: the item gets its terminal error. Its processing child fails with
-- it in the next statement (`children/queries/fail_batch_children.sql`, same transaction):
-- the count triggers (migration 0012) need a statement to change items or children, not
-- both. Cancelled items are left alone (they are already terminal).
UPDATE batch_item AS bi
SET error_message = s.error,
    lease_until = NULL,
    updated_by = %(actor)s
FROM unnest(%(ids)s::text[], %(attempts)s::int[], %(errors)s::text[]) AS s (id, attempt, error)
WHERE bi.id = s.id
  AND bi.dispatch_attempts = s.attempt
  AND bi.dispatched_at IS NULL
  AND bi.error_message IS NULL
  AND bi.cancelled_at IS NULL
RETURNING bi.job_id, bi.error_message
