-- Lock waiting parents before a child's terminal write (DESIGN.md 3, invariant 12), in id
-- order so two transactions locking several parents never deadlock. A later statement of
-- the same transaction then counts the children with a snapshot taken after the lock, so
-- of two children finishing at once the second always sees the first. FOR NO KEY UPDATE:
-- inserting children (foreign key share lock) is not blocked.
SELECT id
FROM jobs
WHERE id = ANY(%(ids)s::uuid[])
ORDER BY id
FOR NO KEY UPDATE
