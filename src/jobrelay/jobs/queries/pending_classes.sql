-- The concurrency classes that have pending jobs: what a claim without a class list claims
-- from. Only operators' checks and tests claim that way (workers always name their
-- classes), so a plain scan of the pending jobs is fine here.
SELECT DISTINCT concurrency_class FROM jobs WHERE status = 'pending'
