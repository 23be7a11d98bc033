UPDATE batch
SET cancelled_at = clock_timestamp(),
    updated_by = %(actor)s
WHERE id = %(batch_id)s
  AND cancelled_at IS NULL
