-- End waiting parents whose children are all terminal (DESIGN.md 3, invariant 12). Runs in
-- the transaction of a child's terminal write, after lock_parents, or from the periodic
-- reconciler after lock_stale_parents. Only parents (role `parent`) that still wait
-- (pending) are touched, so a parent ends exactly once.
-- Dispatch children (role `dispatch`) are not items: they are not counted, but a dispatch
-- that did not complete fails the parent. A parent without any child (its dispatch was
-- lost) fails. Otherwise: completed when every item completed, else failed; the counts go
-- into the parent's result.
WITH tally AS (
    SELECT
        parent.id,
        count(child.id) FILTER (
            WHERE child.status IN ('pending', 'in_progress')
        ) AS active,
        count(child.id) FILTER (
            WHERE child.role = 'dispatch'
        ) AS dispatches,
        count(child.id) FILTER (
            WHERE child.role = 'dispatch' AND child.status <> 'completed'
        ) AS dispatch_failed,
        max(coalesce(child.last_error, child.status)) FILTER (
            WHERE child.role = 'dispatch' AND child.status <> 'completed'
        ) AS dispatch_error,
        count(child.id) FILTER (
            WHERE child.role <> 'dispatch'
        ) AS total,
        count(child.id) FILTER (
            WHERE child.role <> 'dispatch' AND child.status = 'completed'
        ) AS completed,
        count(child.id) FILTER (
            WHERE child.role <> 'dispatch' AND child.status = 'failed'
        ) AS failed,
        count(child.id) FILTER (
            WHERE child.role <> 'dispatch' AND child.status = 'cancelled'
        ) AS cancelled
    FROM jobs AS parent
    LEFT JOIN jobs AS child ON child.parent_id = parent.id
    WHERE parent.id = ANY(%(ids)s::uuid[])
        AND parent.role = 'parent'
        AND parent.status = 'pending'
    GROUP BY parent.id
),
verdict AS (
    SELECT
        tally.*,
        (tally.dispatches > 0 AND tally.dispatch_failed = 0 AND tally.completed = tally.total)
            AS ok
    FROM tally
    WHERE tally.active = 0
)
UPDATE jobs AS parent
SET
    status = CASE WHEN verdict.ok THEN 'completed' ELSE 'failed' END,
    failure_kind = CASE WHEN verdict.ok THEN NULL ELSE 'permanent' END,
    last_error = CASE
        WHEN verdict.ok THEN NULL
        WHEN verdict.dispatches = 0 THEN 'no dispatch job: the parent has no children'
        WHEN verdict.dispatch_failed > 0 THEN 'dispatch failed: ' || verdict.dispatch_error
        ELSE (verdict.failed + verdict.cancelled) || ' of ' || verdict.total
            || ' children did not complete (' || verdict.failed || ' failed, '
            || verdict.cancelled || ' cancelled)'
    END,
    result = jsonb_build_object(
        'total', verdict.total,
        'completed', verdict.completed,
        'failed', verdict.failed,
        'cancelled', verdict.cancelled
    ),
    claim_token = NULL,
    lease_expires_at = NULL,
    finished_at = clock_timestamp()
FROM verdict
WHERE parent.id = verdict.id
RETURNING parent.id, parent.status
