INSERT INTO project (organization_id, name, created_by, updated_by)
SELECT o.id, %(name)s, %(actor)s, %(actor)s
FROM organization AS o
WHERE o.id = %(organization_id)s
  AND o.deleted_at IS NULL
RETURNING id, organization_id, name, created_at
