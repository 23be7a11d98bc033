-- Whether enqueueing is paused by the operator (jobs_control); read by a bulk enqueue that
-- copies its jobs in (enqueue_copy.sql) in the same transaction, before the COPY.
SELECT enqueue_paused FROM jobs_control
