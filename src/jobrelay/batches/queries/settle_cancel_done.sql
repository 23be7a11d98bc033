-- The background cancel of a batch is done: no processing child is left.
UPDATE batch
SET cancel_settled_at = clock_timestamp()
WHERE id = %(batch_id)s
  AND cancel_settled_at IS NULL
