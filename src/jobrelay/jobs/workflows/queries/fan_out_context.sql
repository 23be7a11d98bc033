-- What a fan-out checks in the completing step's transaction: whether the workflow was
-- cancelled (then nothing is added), its size and fairness key, which of the new names it
-- has already, and which of the `then` names are held steps waiting on the adding step
-- (only those may wait for the new steps: the graph stays acyclic, and they are still
-- held, since the adding step has not ended yet).
SELECT
    workflow.cancelled_at IS NOT NULL AS cancelled,
    workflow.fairness_key,
    (SELECT count(*) FROM workflow_steps WHERE workflow_id = workflow.id) AS step_count,
    ARRAY(
        SELECT name
        FROM workflow_steps
        WHERE workflow_id = workflow.id
            AND name = ANY(%(names)s::text[])
    ) AS taken,
    ARRAY(
        SELECT step.name
        FROM workflow_edges AS edge
        JOIN workflow_steps AS step ON step.job_id = edge.downstream_id
        JOIN jobs ON jobs.id = step.job_id
        WHERE edge.upstream_id = %(adding)s
            AND step.name = ANY(%(then)s::text[])
            AND jobs.status = 'pending'
            AND jobs.available_at = '9999-12-31 00:00:00+00'::timestamptz
    ) AS held_dependents,
    ARRAY(
        SELECT step.job_id
        FROM workflow_edges AS edge
        JOIN workflow_steps AS step ON step.job_id = edge.downstream_id
        WHERE edge.upstream_id = %(adding)s
            AND step.name = ANY(%(then)s::text[])
        ORDER BY step.job_id
    ) AS then_ids
FROM workflows AS workflow
WHERE workflow.id = %(workflow_id)s
