-- The claim floor of each class %(classes)s[i] (issue 27): the earliest available_at of its
-- pending jobs without source key, looking no further back than %(since)s[i] (NULL:
-- everything), and never later than the database's clock; a class with none gets the
-- clock minus one second. A job due later (a waiting parent, a runAt ahead) must not hide a
-- job that becomes due before it, such as a retry without backoff or a new enqueue.
--
-- Why: a claim scans jobs_pending_class_idx / jobs_pending_fair_idx in (priority,
-- available_at, id) order, and the entries of jobs claimed since the oldest open snapshot
-- (an idle transaction, a REPEATABLE READ report) stay in those indexes, ahead of every
-- pending job, until vacuum may remove them. Every claim would visit them all, with a heap
-- fetch each. With `available_at >= floor` the scan starts at the floor of each priority
-- (an index condition, PostgreSQL 18's skip scan) or at least rejects those entries inside
-- the index without a heap fetch (PostgreSQL 15).
--
-- Read one index entry per priority with pending work: a skip scan over the priorities of
-- the class (a recursive CTE), then the first entry of each. Only the entries since
-- %(since)s are read, so a refresh costs the jobs claimed since the last one, not since
-- the horizon was pinned.
WITH RECURSIVE bounds AS (
    SELECT c.cls, coalesce(c.since, '-infinity') AS since
    FROM unnest(%(classes)s::text[], %(since)s::timestamptz[]) AS c (cls, since)
),
priorities AS (
    SELECT
        bounds.cls,
        bounds.since,
        (
            SELECT min(j.priority)
            FROM jobs AS j
            WHERE j.status = 'pending'
                AND j.source_key IS NULL
                AND j.concurrency_class = bounds.cls
                AND j.available_at >= bounds.since
        ) AS priority
    FROM bounds
    UNION ALL
    SELECT
        priorities.cls,
        priorities.since,
        (
            SELECT min(j.priority)
            FROM jobs AS j
            WHERE j.status = 'pending'
                AND j.source_key IS NULL
                AND j.concurrency_class = priorities.cls
                AND j.priority > priorities.priority
                AND j.available_at >= priorities.since
        )
    FROM priorities
    WHERE priorities.priority IS NOT NULL
)
SELECT
    bounds.cls AS concurrency_class,
    coalesce(
        (
            SELECT least(min(head.available_at), clock_timestamp())
            FROM priorities
            CROSS JOIN LATERAL (
                SELECT j.available_at
                FROM jobs AS j
                WHERE j.status = 'pending'
                    AND j.source_key IS NULL
                    AND j.concurrency_class = priorities.cls
                    AND j.priority = priorities.priority
                    AND j.available_at >= priorities.since
                ORDER BY j.available_at
                LIMIT 1
            ) AS head
            WHERE priorities.cls = bounds.cls
                AND priorities.priority IS NOT NULL
        ),
        clock_timestamp() - interval '1 second'
    ) AS floor
FROM bounds
