SELECT *
FROM code2wf
WHERE id = %(id)s
  AND deleted_at IS NULL
