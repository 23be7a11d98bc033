-- Claim jobs for one worker in one statement (DESIGN.md 3, invariants 4, 10, 11, 13):
-- up to %(limits)s[i] jobs of class %(classes)s[i] and %(total)s in all, in order of
-- priority, available_at, id; nothing while claims are paused. This is the claim without
-- fairness keys (JOBRELAY_WORKER_FAIR_CLAIMS=false, and the baseline of bench/fairness.py);
-- claim_jobs.sql is the same statement with fair rotation across jobs.fairness_key.
--
-- * Row locks: each candidate set is a LIMIT ... FOR NO KEY UPDATE SKIP LOCKED inside a
--   MATERIALIZED CTE, so exactly the locked rows are claimed (a LIMIT inside
--   `IN (subquery ... SKIP LOCKED)` may be re-evaluated and claim more than asked), and a
--   row share-locked by an uncommitted child insert (foreign key parent_id) stays claimable.
-- * Serialization (invariant 11): jobs with a source_key are only claimed as the head (next
--   in order) of a source that runs nothing; a head locked by another claimer is skipped,
--   so a busy source never blocks the others. The unique index jobs_running_source_key is
--   the guarantee; in the rare race where another claimer committed a different head of the
--   same source after this statement's snapshot, the UPDATE fails on that index and the
--   worker retries the cycle.
-- * Global caps (invariant 10): a class with a cap %(caps)s[i] (NULL: none) has that many
--   slots; each claimed job takes a free slot number in class_slot, and the unique index
--   jobs_running_class_slot holds one running job per (class, slot). Claimers of capped
--   classes first take claim_lock_classes (an advisory transaction lock per class), so this
--   statement's snapshot already sees every slot taken by an earlier claimer.
-- * Time is the database's: available_at and the lease use clock_timestamp().
WITH RECURSIVE wanted AS (
    SELECT
        w.cls,
        w.cap,
        CASE
            WHEN w.cap IS NULL THEN w.lim
            ELSE greatest(
                least(
                    w.lim,
                    w.cap - (
                        SELECT count(*)
                        FROM jobs AS held
                        WHERE held.status = 'in_progress'
                            AND held.concurrency_class = w.cls
                            AND held.class_slot IS NOT NULL
                    )
                ),
                0
            )
        END AS lim
    FROM unnest(%(classes)s::text[], %(limits)s::integer[], %(caps)s::integer[])
        AS w (cls, lim, cap)
    WHERE NOT (SELECT claims_paused FROM jobs_control)
        AND w.lim > 0
),
pending_sources AS (
    -- Every source with a pending job, by a skip scan of jobs_pending_source_idx (one
    -- index probe per source instead of reading every pending job of every source).
    SELECT min(j.source_key) AS source_key
    FROM jobs AS j
    WHERE j.status = 'pending' AND j.source_key IS NOT NULL
    UNION ALL
    SELECT (
        SELECT min(j.source_key)
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.source_key IS NOT NULL
            AND j.source_key > pending_sources.source_key
    )
    FROM pending_sources
    WHERE pending_sources.source_key IS NOT NULL
),
heads AS (
    -- The next claimable job of each source that runs nothing now.
    SELECT head.id, head.concurrency_class
    FROM pending_sources
    CROSS JOIN LATERAL (
        SELECT j.id, j.concurrency_class
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.source_key = pending_sources.source_key
            AND j.available_at <= clock_timestamp()
            AND j.concurrency_class = ANY(%(classes)s::text[])
        ORDER BY j.priority, j.available_at, j.id
        LIMIT 1
    ) AS head
    WHERE pending_sources.source_key IS NOT NULL
        AND NOT EXISTS (
            SELECT 1
            FROM jobs AS running
            WHERE running.source_key = pending_sources.source_key
                AND running.status = 'in_progress'
        )
),
candidates AS MATERIALIZED (
    SELECT free.id, free.concurrency_class, free.priority, free.available_at
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT j.id, j.concurrency_class, j.priority, j.available_at
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.available_at <= clock_timestamp()
            AND j.concurrency_class = wanted.cls
            AND j.source_key IS NULL
        ORDER BY j.priority, j.available_at, j.id
        LIMIT wanted.lim
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS free
    UNION ALL
    SELECT serial.id, serial.concurrency_class, serial.priority, serial.available_at
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT j.id, j.concurrency_class, j.priority, j.available_at
        FROM jobs AS j
        -- An array, not `IN (SELECT ...)`: the heads are then fetched by primary key; the
        -- generic plan of an IN would hash-join them against a scan of every pending job.
        WHERE j.id = ANY(
            ARRAY(SELECT heads.id FROM heads WHERE heads.concurrency_class = wanted.cls)
        )
            AND j.status = 'pending'
        ORDER BY j.priority, j.available_at, j.id
        LIMIT wanted.lim
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS serial
),
ranked AS (
    SELECT
        candidates.id,
        candidates.concurrency_class,
        candidates.priority,
        candidates.available_at,
        row_number() OVER (
            PARTITION BY candidates.concurrency_class
            ORDER BY candidates.priority, candidates.available_at, candidates.id
        ) AS nth
    FROM candidates
),
free_slots AS (
    SELECT
        wanted.cls,
        slot.n AS slot,
        row_number() OVER (PARTITION BY wanted.cls ORDER BY slot.n) AS nth
    FROM wanted
    CROSS JOIN LATERAL generate_series(1, wanted.cap) AS slot (n)
    WHERE wanted.cap IS NOT NULL
        AND NOT EXISTS (
            SELECT 1
            FROM jobs AS held
            WHERE held.status = 'in_progress'
                AND held.concurrency_class = wanted.cls
                AND held.class_slot = slot.n
        )
),
picked AS (
    SELECT
        ranked.id,
        free_slots.slot,
        row_number() OVER (
            ORDER BY ranked.priority, ranked.available_at, ranked.id
        ) AS overall
    FROM ranked
    JOIN wanted ON wanted.cls = ranked.concurrency_class
    LEFT JOIN free_slots
        ON free_slots.cls = ranked.concurrency_class
        AND free_slots.nth = ranked.nth
    WHERE ranked.nth <= wanted.lim
        AND (wanted.cap IS NULL OR free_slots.slot IS NOT NULL)
)
UPDATE jobs
SET
    status = 'in_progress',
    claim_token = gen_random_uuid(),
    claimed_by = %(worker_id)s,
    claimed_at = clock_timestamp(),
    attempt_count = jobs.attempt_count + 1,
    lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
    heartbeat_at = clock_timestamp(),
    class_slot = picked.slot
FROM picked
WHERE jobs.id = picked.id
    AND picked.overall <= %(total)s
RETURNING
    jobs.id, jobs.type, jobs.payload, jobs.revision, jobs.claim_token, jobs.attempt_count,
    jobs.max_attempts, jobs.source_key, jobs.concurrency_class, jobs.parent_id, jobs.claimed_at
