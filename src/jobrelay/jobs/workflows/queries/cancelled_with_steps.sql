-- The backstop of a cancel (the worker's maintenance): cancelled workflows that still have
-- an active step, e.g. one a concurrent completion released or added after the cancel's
-- sweep, or whose canceller died between marking and sweeping.
SELECT id
FROM workflows
WHERE cancelled_at IS NOT NULL
    AND EXISTS (SELECT 1 FROM jobs WHERE jobs.workflow_id = workflows.id)
ORDER BY cancelled_at
LIMIT %(limit)s
