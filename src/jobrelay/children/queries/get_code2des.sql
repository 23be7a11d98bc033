SELECT id, organization_id, project_id, batch_id, request, status, result_url,
       error_message, created_at, updated_at, created_by, updated_by
FROM code2des
WHERE id = %(id)s
  AND deleted_at IS NULL
