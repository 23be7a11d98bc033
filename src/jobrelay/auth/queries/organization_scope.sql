-- Whether the subject may act in the organization; no row means 404.
SELECT m.organization_id, m.role
FROM organization_member AS m
JOIN organization AS o ON o.id = m.organization_id AND o.deleted_at IS NULL
WHERE m.organization_id = %(organization_id)s
  AND m.subject = %(subject)s
