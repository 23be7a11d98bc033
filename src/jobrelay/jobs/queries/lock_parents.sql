-- Lock waiting parents before a child's terminal write (invariant 12 of the jobs engine:
-- parents always end), in id order. A later statement of the same transaction then counts
-- the children with a snapshot taken after the lock, so of two children finishing at once
-- the second always sees the first. FOR NO KEY UPDATE: inserting children (foreign key
-- share lock) is not blocked. SKIP LOCKED: a parent another transaction holds is not
-- waited for; the children of a parent not returned are left for the next try (a sibling's
-- transaction holds it for milliseconds, an outside lock for longer).
SELECT id
FROM jobs
WHERE id = ANY(%(ids)s::uuid[])
ORDER BY id
FOR NO KEY UPDATE SKIP LOCKED
