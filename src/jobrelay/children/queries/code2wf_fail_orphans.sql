-- Generations still processing whose dispatch job ended without dispatching (lease expired
-- on its last attempt, cancelled by an operator): fail them so none waits forever.
UPDATE code2wf AS c
SET status = '2',
    error_message = 'dispatch did not complete (' || j.status || ')',
    updated_by = 'worker'
FROM all_jobs AS j
WHERE j.type = 'code2wf.dispatch'
  AND j.status IN ('failed', 'cancelled')
  AND j.payload ->> 'code2wfId' = c.id
  AND c.status = '0'
RETURNING c.id
