-- Workflows newest first (ids are UUIDv7: id order is creation order), after the cursor,
-- by name when given, each with its derived status and its number of steps. The caller
-- filters by status over at most %(scan)s rows a page (statuses are derived, not stored).
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
    jobrelay_workflow_status_v1(workflow) AS status,
    (SELECT count(*) FROM workflow_steps WHERE workflow_id = workflow.id) AS step_count
FROM workflows AS workflow
WHERE (%(name)s::text IS NULL OR workflow.name = %(name)s::text)
    AND (%(before)s::uuid IS NULL OR workflow.id < %(before)s::uuid)
ORDER BY workflow.id DESC
LIMIT %(scan)s
