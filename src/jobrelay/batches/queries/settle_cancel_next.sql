-- The sweeper's next cancelled batch whose children and items are still to be marked
-- (batch_cancelling_idx), locked like a cancel locks it; a batch another sweeper, cancel or
-- delete holds is skipped, not waited for.
SELECT id, type
FROM batch
WHERE cancelled_at IS NOT NULL
  AND cancel_settled_at IS NULL
  AND deleted_at IS NULL
ORDER BY cancelled_at
LIMIT 1
FOR NO KEY UPDATE SKIP LOCKED
