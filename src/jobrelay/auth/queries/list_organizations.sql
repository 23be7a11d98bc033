SELECT
    o.id,
    o.name,
    coalesce(
        (SELECT jsonb_agg(jsonb_build_object('id', p.id, 'name', p.name) ORDER BY p.id)
         FROM project AS p
         WHERE p.organization_id = o.id AND p.deleted_at IS NULL),
        '[]'::jsonb
    ) AS projects,
    coalesce(
        (SELECT jsonb_agg(jsonb_build_object('subject', m.subject, 'role', m.role)
                          ORDER BY m.subject)
         FROM organization_member AS m
         WHERE m.organization_id = o.id),
        '[]'::jsonb
    ) AS members
FROM organization AS o
WHERE o.deleted_at IS NULL
ORDER BY o.id
