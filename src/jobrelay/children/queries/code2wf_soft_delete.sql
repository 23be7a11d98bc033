UPDATE code2wf
SET deleted_at = clock_timestamp(),
    deleted_by = %(actor)s,
    updated_by = %(actor)s
WHERE id = %(id)s
  AND deleted_at IS NULL
RETURNING id
