SELECT id, organization_id, name, created_at, updated_at, created_by, updated_by
FROM project
WHERE id = %(project_id)s
  AND deleted_at IS NULL
