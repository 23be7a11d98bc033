-- One workflow's row (status and counts are derived from its steps: workflow_steps.sql).
SELECT id, name, fairness_key, created_at, cancelled_at, cancelled_by
FROM workflows
WHERE id = %(id)s
