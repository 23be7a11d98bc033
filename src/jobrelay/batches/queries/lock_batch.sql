-- Serializes cancel and delete of one batch. NO KEY UPDATE, the lock their own UPDATE of the
-- row takes: a FOR UPDATE would also block the foreign-key checks (KEY SHARE) of writers
-- appending count deltas of this batch (a relay recording sends), which deadlocked with the
-- cancel waiting on their items.
SELECT id, organization_id, project_id, type, cancelled_at, created_at, updated_at,
       created_by, updated_by
FROM batch
WHERE id = %(batch_id)s
  AND deleted_at IS NULL
FOR NO KEY UPDATE
