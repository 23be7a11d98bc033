-- The project, if the subject is a member of its organization; no row means 404.
SELECT p.organization_id, p.id AS project_id, m.role
FROM project AS p
JOIN organization AS o ON o.id = p.organization_id AND o.deleted_at IS NULL
JOIN organization_member AS m ON m.organization_id = p.organization_id
WHERE p.id = %(project_id)s
  AND p.deleted_at IS NULL
  AND m.subject = %(subject)s
