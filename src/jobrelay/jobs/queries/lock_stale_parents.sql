-- The periodic parent reconciler: lock waiting parents (role `parent`) that have no
-- active child left (every child terminal, or none at all). Normally the last child's
-- transaction already ended them; this repairs any that were left behind. SKIP LOCKED: a
-- parent locked by a finishing child is that child's business.
SELECT parent.id
FROM jobs AS parent
WHERE parent.role = 'parent'
    AND parent.status = 'pending'
    AND NOT EXISTS (
        SELECT 1
        FROM jobs AS child
        WHERE child.parent_id = parent.id
            AND child.status IN ('pending', 'in_progress')
    )
ORDER BY parent.id
LIMIT %(limit)s
FOR NO KEY UPDATE SKIP LOCKED
