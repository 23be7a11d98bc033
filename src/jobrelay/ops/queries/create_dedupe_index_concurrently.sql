CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_active_dedupe_key
    ON jobs (type, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'in_progress')
