-- Serializes cancel and delete of one batch.
SELECT id, organization_id, project_id, type, cancelled_at, created_at, updated_at,
       created_by, updated_by
FROM batch
WHERE id = %(batch_id)s
  AND deleted_at IS NULL
FOR UPDATE
