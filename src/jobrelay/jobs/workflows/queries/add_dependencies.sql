-- A fan-out's fan-in: each step named in `then` waits for the steps just added as well
-- (its row is locked already: lock_dependents.sql locked the adding step's dependents).
UPDATE workflow_steps
SET dependencies_left = dependencies_left + %(added)s
WHERE job_id = ANY(%(ids)s::uuid[])
