-- Lock the steps that wait on the given ending steps (their workflow_steps rows, in id
-- order) before those end, in the ending transaction, as lock_parents.sql locks a child's
-- parent: of two dependencies ending at once in different transactions, the second waits
-- for the first to commit, so each counts its end into a row the other already changed.
-- SKIP LOCKED: a dependent another transaction holds is not waited for; the ending steps
-- returned have such a dependent and their end is deferred to the next try. Reads only
-- the ending steps' own outgoing edges and their dependents, through primary keys (`= ANY`
-- of arrays built first, so no estimate plans a scan).
WITH wanted AS MATERIALIZED (
    SELECT upstream_id, downstream_id
    FROM workflow_edges
    WHERE upstream_id = ANY(%(ids)s::uuid[])
),
locked AS MATERIALIZED (
    SELECT job_id
    FROM workflow_steps
    WHERE job_id = ANY(ARRAY(SELECT DISTINCT downstream_id FROM wanted))
    ORDER BY job_id
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT DISTINCT upstream_id AS id
FROM wanted
WHERE downstream_id NOT IN (SELECT job_id FROM locked)
