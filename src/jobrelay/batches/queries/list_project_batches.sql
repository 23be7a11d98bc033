-- A project's visible batches, newest first, %(limit)s from %(offset)s (the console lists one
-- page of them); reads batch_project_id_deleted_at_idx.
SELECT id, organization_id, project_id, type, cancelled_at, created_at, updated_at,
       created_by, updated_by
FROM batch
WHERE project_id = %(project_id)s
  AND deleted_at IS NULL
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s
