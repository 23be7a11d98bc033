-- The sweep's candidates: items whose last allowed claim expired without a recorded send
-- (the relay that held the claim died or lost its database connection). Read only: they
-- fail through `fail_items.sql`, guarded by the attempt read here, so a send recorded
-- meanwhile, or an item locked by another transaction, is left alone (the next sweep looks
-- again).
SELECT id, job_id, dispatch_attempts
FROM batch_item
WHERE dispatched_at IS NULL
  AND cancelled_at IS NULL
  AND error_message IS NULL
  AND deleted_at IS NULL
  AND dispatch_attempts >= %(max_attempts)s
  AND lease_until <= clock_timestamp()
ORDER BY id
LIMIT %(limit)s
