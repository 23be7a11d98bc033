INSERT INTO organization_member (organization_id, subject, role, created_by, updated_by)
SELECT o.id, %(subject)s, %(role)s, %(actor)s, %(actor)s
FROM organization AS o
WHERE o.id = %(organization_id)s
  AND o.deleted_at IS NULL
ON CONFLICT (organization_id, subject) DO UPDATE
SET role = EXCLUDED.role,
    updated_by = EXCLUDED.updated_by
RETURNING organization_id, subject, role
