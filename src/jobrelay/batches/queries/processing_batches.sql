-- Batches in progress (not cancelled, not deleted, with a child still processing), oldest
-- first, at most %(limit)s. A queued or running item always has a processing child ('0'):
-- cancel and the relay's final failure end the child too. The children still processing
-- are read from the partial indexes page_import_processing_idx and code2des_processing_idx
-- (migration 0009): proportional to the work in flight, not to the history.
SELECT b.id, b.organization_id, b.project_id, b.type, b.cancelled_at, b.created_at,
       b.updated_at, b.created_by, b.updated_by
FROM batch AS b
WHERE b.cancelled_at IS NULL
  AND b.deleted_at IS NULL
  AND b.id IN (
      SELECT p.batch_id FROM page_import AS p WHERE p.status = '0' AND p.batch_id IS NOT NULL
      UNION
      SELECT c.batch_id FROM code2des AS c WHERE c.status = '0' AND c.batch_id IS NOT NULL
  )
ORDER BY b.created_at, b.id
LIMIT %(limit)s
