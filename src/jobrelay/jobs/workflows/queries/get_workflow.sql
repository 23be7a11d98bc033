-- One workflow's row and its derived status (jobrelay_workflow_status_v1, as in lists).
SELECT
    workflow.id,
    workflow.name,
    workflow.fairness_key,
    workflow.created_at,
    workflow.cancelled_at,
    workflow.cancelled_by,
    workflow.retried_at,
    workflow.retried_by,
    workflow.retries,
    jobrelay_workflow_status_v1(workflow) AS status
FROM workflows AS workflow
WHERE workflow.id = %(id)s
