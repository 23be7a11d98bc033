-- One step of a background cancel, second statement: the items of the children the first
-- statement just cancelled (a statement never changes an item and its child together: see
-- migration 0012).
UPDATE batch_item
SET cancelled_at = clock_timestamp(),
    updated_by = %(actor)s
WHERE batch_id = %(batch_id)s
  AND job_id = ANY(%(child_ids)s::text[])
  AND cancelled_at IS NULL
