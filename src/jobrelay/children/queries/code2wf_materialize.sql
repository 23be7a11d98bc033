-- Placement is recorded once; a repeat finds materialized_at already set and changes nothing.
UPDATE code2wf
SET materialized_at = clock_timestamp(),
    updated_by = %(actor)s
WHERE id = %(id)s
  AND status = '1'
  AND materialized_at IS NULL
  AND deleted_at IS NULL
RETURNING materialized_at
