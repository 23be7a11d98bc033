-- Lease rescue, first statement: lock (in id order) the parents of children whose lease
-- expired, so a child that the rescue fails reconciles its parent like any other terminal
-- write (parent locked first). SKIP LOCKED: a parent another transaction holds is not
-- waited for; its children are rescued by a later pass.
SELECT parent.id
FROM jobs AS parent
WHERE parent.id IN (
    SELECT child.parent_id
    FROM jobs AS child
    WHERE child.status = 'in_progress'
        AND child.lease_expires_at < clock_timestamp()
        AND child.parent_id IS NOT NULL
)
ORDER BY parent.id
FOR NO KEY UPDATE SKIP LOCKED
