-- Lock one workflow's row for a retry (two retries at once: the second waits and then
-- finds the workflow running). Returns whether any step is active.
SELECT id, retries, EXISTS (SELECT 1 FROM jobs WHERE jobs.workflow_id = workflows.id) AS active
FROM workflows
WHERE id = %(id)s
FOR UPDATE
