-- The worker's dedicated connection listens for enqueue wake-ups (trigger
-- jobs_notify_enqueued, release and rescue).
LISTEN jobrelay_jobs
