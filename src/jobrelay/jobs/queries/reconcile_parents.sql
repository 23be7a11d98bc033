-- End waiting parents whose children are all terminal (docs/explanation/state_machine.md, "Parents and children"). Runs in
-- the transaction of a child's terminal write, after lock_parents, or from the periodic
-- reconciler after lock_stale_parents. Only parents (role `parent`) that still wait
-- (pending) are touched, so a parent ends exactly once.
-- Dispatch children (role `dispatch`) are not items: they are not counted, but a dispatch
-- that did not complete fails the parent. A parent without any child (its dispatch was
-- lost) fails. Otherwise: completed when every item completed, else failed; the counts go
-- into the parent's result. The ended parent leaves `jobs` for `finished_jobs`; its children
-- are read from both (`all_jobs`). The DELETE needs a lock that another transaction's FOR
-- KEY SHARE blocks: a parent locked that way is not waited for (FOR UPDATE SKIP LOCKED)
-- but left pending for the periodic reconciler, which ends it once the lock is gone.
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
    LEFT JOIN all_jobs AS child ON child.parent_id = parent.id
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
),
deletable AS MATERIALIZED (
    SELECT parent.id
    FROM jobs AS parent
    WHERE parent.id IN (SELECT verdict.id FROM verdict)
    FOR UPDATE SKIP LOCKED
),
ended AS (
    DELETE FROM jobs AS parent
    USING verdict
    WHERE parent.id = verdict.id
        AND parent.id IN (SELECT deletable.id FROM deletable)
    RETURNING parent AS job, verdict.*
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM ended
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        ended.job,
        jsonb_build_object(
            'status', CASE WHEN ended.ok THEN 'completed' ELSE 'failed' END,
            'failure_kind', CASE WHEN ended.ok THEN NULL ELSE 'permanent' END,
            'last_error', CASE
                WHEN ended.ok THEN NULL
                WHEN ended.dispatches = 0 THEN 'no dispatch job: the parent has no children'
                WHEN ended.dispatch_failed > 0 THEN 'dispatch failed: ' || ended.dispatch_error
                ELSE (ended.failed + ended.cancelled) || ' of ' || ended.total
                    || ' children did not complete (' || ended.failed || ' failed, '
                    || ended.cancelled || ' cancelled)'
            END,
            'result', jsonb_build_object(
                'total', ended.total,
                'completed', ended.completed,
                'failed', ended.failed,
                'cancelled', ended.cancelled
            )
        )
    ) AS finished
    RETURNING finished_jobs.id, finished_jobs.status
)
SELECT id, status FROM archived
