-- The ended unsuccessful attempts of one job (job_attempts), oldest first, at most
-- %(limit)s. A completed attempt is the job row itself and is not listed.
SELECT job_id, claim_token, attempt, worker_id, started_at, ended_at, outcome, error
FROM job_attempts
WHERE job_id = %(id)s
ORDER BY ended_at, attempt
LIMIT %(limit)s
