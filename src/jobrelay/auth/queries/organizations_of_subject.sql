SELECT
    o.id,
    o.name,
    m.role,
    coalesce(
        (SELECT jsonb_agg(jsonb_build_object('id', p.id, 'name', p.name) ORDER BY p.id)
         FROM project AS p
         WHERE p.organization_id = o.id AND p.deleted_at IS NULL),
        '[]'::jsonb
    ) AS projects
FROM organization_member AS m
JOIN organization AS o ON o.id = m.organization_id AND o.deleted_at IS NULL
WHERE m.subject = %(subject)s
ORDER BY o.id
