-- The pause flags (jobs_control's singleton row) and the database time of the reading.
SELECT c.claims_paused, c.enqueue_paused, c.reason, c.updated_by, c.updated_at,
       clock_timestamp() AS checked_at
FROM jobs_control AS c
WHERE c.id
