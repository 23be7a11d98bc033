-- Cancel the batch row. `settled`: the cancel marks every child and item in this same
-- transaction (a batch of at most JOBRELAY_BATCH_CANCEL_INLINE_MAX processing items); else
-- the relay's sweeper does it in short transactions (settle_cancel_*.sql) and sets
-- cancel_settled_at when it is done (migration 0014).
UPDATE batch
SET cancelled_at = clock_timestamp(),
    cancel_settled_at = CASE WHEN %(settled)s THEN clock_timestamp() END,
    updated_by = %(actor)s
WHERE id = %(batch_id)s
  AND cancelled_at IS NULL
