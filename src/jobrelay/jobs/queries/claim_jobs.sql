-- Claim jobs for one worker in one statement (docs/explanation/design.md, "The jobs engine"):
-- up to %(limits)s[i] jobs of class %(classes)s[i] and %(total)s in all, by priority, then
-- fairly across fairness keys, then by available_at, id; nothing while claims are paused.
-- %(fair)s false (JOBRELAY_WORKER_FAIR_CLAIMS=false) skips the fairness keys: every class is
-- then claimed as a class without keys is, by priority, available_at, id.
--
-- * Fairness (issue 17): jobs without a source key are grouped by jobs.fairness_key (NULL is
--   one group). The keys with pending work come from a skip scan of jobs_pending_fair_idx;
--   each key's head gives its best priority and its running jobs in the class its load.
--   Keys are ranked by (head priority, running, a random draw) and at most %(limits)s[i]
--   kept; key number n may contribute at most limit - n + 1 jobs (every earlier key's head
--   goes before any of its jobs). A job's level is its key's running count plus its rank in
--   the key, and jobs are taken by (priority, level, draw): round-robin across keys, the
--   least loaded key first, ties broken at random per claim (no state to update, so a
--   single key costs no contention). Priority still wins across priorities. The heads of
--   sources (serialized jobs) have level 1 and draw 0. A class with no key pending (every job
--   NULL, the default) skips all of this: its jobs have level 1 and draw 0 too, so they are
--   taken in strict (priority, available_at, id) order, as with %(fair)s false.
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
-- * Served types (issue 24, rolling deploys): only jobs whose type is in %(types)s (NULL:
--   every type) are claimed, so a worker never takes a job it has no handler for; the job
--   stays pending for a worker that has one. A source whose head is of a type this worker
--   does not serve is left to another worker (its later jobs wait behind the head).
-- * Claim floors (issue 27): %(floors)s[i] (NULL: none) is a lower bound on the available_at
--   of every pending job of class i without source key (`jobs/floors.py`). The scans of
--   the pending indexes read only `available_at >= floor`, so the entries of jobs claimed
--   since an old snapshot pinned the horizon (still in the indexes until vacuum may remove
--   them) are not visited. Running jobs are counted for the fairness load by their live
--   leases only (`lease_expires_at` reached: a dead worker's job, about to be rescued), for
--   the same reason. Sources are read without a floor.
-- * Time is the database's: available_at and the lease use clock_timestamp().
WITH RECURSIVE wanted AS (
    SELECT
        w.cls,
        w.cap,
        coalesce(w.floor, '-infinity'::timestamptz) AS floor,
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
    FROM unnest(
        %(classes)s::text[], %(limits)s::integer[], %(caps)s::integer[],
        %(floors)s::timestamptz[]
    ) AS w (cls, lim, cap, floor)
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
fair_keys AS (
    -- Every fairness key with a pending job without source key, per wanted class: a skip
    -- scan of jobs_pending_fair_idx (one index probe per key). The last row of each class
    -- has a NULL key and stands for the group of jobs without a key. Without %(fair)s no
    -- class has keys (a one-time filter: the generic plan skips the scan).
    SELECT
        wanted.cls,
        wanted.floor,
        (
            SELECT min(j.fairness_key)
            FROM jobs AS j
            WHERE j.status = 'pending'
                AND j.source_key IS NULL
                AND j.concurrency_class = wanted.cls
                AND j.available_at >= wanted.floor
        ) AS fairness_key
    FROM wanted
    WHERE %(fair)s::boolean
    UNION ALL
    SELECT
        fair_keys.cls,
        fair_keys.floor,
        (
            SELECT min(j.fairness_key)
            FROM jobs AS j
            WHERE j.status = 'pending'
                AND j.source_key IS NULL
                AND j.concurrency_class = fair_keys.cls
                AND j.fairness_key > fair_keys.fairness_key
                AND j.available_at >= fair_keys.floor
        )
    FROM fair_keys
    WHERE fair_keys.fairness_key IS NOT NULL
),
keyed AS (
    -- Classes with at least one fairness key pending. A class without (every job NULL: a
    -- single group, the default) skips the fairness work and is claimed in strict order.
    SELECT DISTINCT fair_keys.cls
    FROM fair_keys
    WHERE fair_keys.fairness_key IS NOT NULL
),
key_heads AS (
    -- The priority of each key's next available job (keys with none drop out).
    SELECT fair_keys.cls, fair_keys.fairness_key, head.priority
    FROM fair_keys
    CROSS JOIN LATERAL (
        SELECT j.priority
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.source_key IS NULL
            AND j.concurrency_class = fair_keys.cls
            AND j.fairness_key = fair_keys.fairness_key
            AND j.available_at <= clock_timestamp()
            AND j.available_at >= fair_keys.floor
        ORDER BY j.priority, j.available_at, j.id
        LIMIT 1
    ) AS head
    WHERE fair_keys.fairness_key IS NOT NULL
    UNION ALL
    SELECT wanted.cls, NULL, head.priority
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT j.priority
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.source_key IS NULL
            AND j.concurrency_class = wanted.cls
            AND j.fairness_key IS NULL
            AND j.available_at <= clock_timestamp()
            AND j.available_at >= wanted.floor
        ORDER BY j.priority, j.available_at, j.id
        LIMIT 1
    ) AS head
    WHERE wanted.cls IN (SELECT keyed.cls FROM keyed)
),
key_load AS (
    -- Running jobs per class and key (at most the fleet's slots: cheap to count).
    SELECT r.concurrency_class AS cls, r.fairness_key, count(*) AS running
    FROM jobs AS r
    WHERE r.status = 'in_progress'
        -- now(), not clock_timestamp(): a stable bound is an index condition.
        AND r.lease_expires_at >= now()
        AND r.concurrency_class = ANY(%(classes)s::text[])
        AND r.source_key IS NULL
    GROUP BY r.concurrency_class, r.fairness_key
),
drawn_keys AS MATERIALIZED (
    SELECT
        key_heads.cls,
        key_heads.fairness_key,
        key_heads.priority,
        coalesce(key_load.running, 0) AS running,
        random() AS draw
    FROM key_heads
    LEFT JOIN key_load
        ON key_load.cls = key_heads.cls
        AND key_load.fairness_key IS NOT DISTINCT FROM key_heads.fairness_key
),
chosen_keys AS (
    SELECT ordered.*, wanted.lim - ordered.nth + 1 AS take, wanted.floor
    FROM (
        SELECT
            drawn_keys.*,
            row_number() OVER (
                PARTITION BY drawn_keys.cls
                ORDER BY drawn_keys.priority, drawn_keys.running, drawn_keys.draw
            ) AS nth
        FROM drawn_keys
    ) AS ordered
    JOIN wanted ON wanted.cls = ordered.cls
    WHERE ordered.nth <= wanted.lim
),
candidates AS MATERIALIZED (
    SELECT
        free.id, wanted.cls AS concurrency_class, free.priority, free.available_at,
        NULL::text AS fairness_key, 0::bigint AS running, 0::float8 AS draw, TRUE AS flat
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.available_at
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.available_at <= clock_timestamp()
            AND j.available_at >= wanted.floor
            AND j.concurrency_class = wanted.cls
            AND j.source_key IS NULL
            AND (%(types)s::text[] IS NULL OR j.type = ANY(%(types)s::text[]))
        ORDER BY j.priority, j.available_at, j.id
        LIMIT wanted.lim
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS free
    WHERE wanted.cls NOT IN (SELECT keyed.cls FROM keyed)
    UNION ALL
    SELECT
        free.id, chosen_keys.cls, free.priority, free.available_at,
        chosen_keys.fairness_key, chosen_keys.running, chosen_keys.draw, FALSE
    FROM chosen_keys
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.available_at
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.available_at <= clock_timestamp()
            AND j.available_at >= chosen_keys.floor
            AND j.concurrency_class = chosen_keys.cls
            AND j.source_key IS NULL
            AND j.fairness_key = chosen_keys.fairness_key
            AND (%(types)s::text[] IS NULL OR j.type = ANY(%(types)s::text[]))
        ORDER BY j.priority, j.available_at, j.id
        LIMIT chosen_keys.take
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS free
    WHERE chosen_keys.fairness_key IS NOT NULL
    UNION ALL
    SELECT
        free.id, chosen_keys.cls, free.priority, free.available_at,
        NULL, chosen_keys.running, chosen_keys.draw, FALSE
    FROM chosen_keys
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.available_at
        FROM jobs AS j
        WHERE j.status = 'pending'
            AND j.available_at <= clock_timestamp()
            AND j.available_at >= chosen_keys.floor
            AND j.concurrency_class = chosen_keys.cls
            AND j.source_key IS NULL
            AND j.fairness_key IS NULL
            AND (%(types)s::text[] IS NULL OR j.type = ANY(%(types)s::text[]))
        ORDER BY j.priority, j.available_at, j.id
        LIMIT chosen_keys.take
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS free
    WHERE chosen_keys.fairness_key IS NULL
    UNION ALL
    SELECT
        serial.id, serial.concurrency_class, serial.priority, serial.available_at,
        NULL, 0, 0, TRUE
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT j.id, j.concurrency_class, j.priority, j.available_at
        -- Each head joined by primary key, not `IN (SELECT ...)` nor `id = ANY(array)`: the
        -- generic plan of either scanned jobs_type_status_idx through every pending job of
        -- the served types, dead versions included (issue 27).
        FROM unnest(
            ARRAY(SELECT heads.id FROM heads WHERE heads.concurrency_class = wanted.cls)
        ) AS head (id)
        JOIN jobs AS j ON j.id = head.id
        WHERE j.status = 'pending'
            AND (%(types)s::text[] IS NULL OR j.type = ANY(%(types)s::text[]))
        ORDER BY j.priority, j.available_at, j.id
        LIMIT wanted.lim
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS serial
),
leveled AS (
    SELECT
        candidates.id,
        candidates.concurrency_class,
        candidates.priority,
        candidates.available_at,
        candidates.draw,
        CASE
            WHEN candidates.flat THEN 1
            ELSE candidates.running + row_number() OVER (
                PARTITION BY candidates.concurrency_class, candidates.flat,
                    candidates.fairness_key
                ORDER BY candidates.priority, candidates.available_at, candidates.id
            )
        END AS level
    FROM candidates
),
ranked AS (
    SELECT
        leveled.id,
        leveled.concurrency_class,
        leveled.priority,
        leveled.level,
        leveled.draw,
        leveled.available_at,
        row_number() OVER (
            PARTITION BY leveled.concurrency_class
            ORDER BY leveled.priority, leveled.level, leveled.draw, leveled.available_at,
                leveled.id
        ) AS nth
    FROM leveled
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
            ORDER BY ranked.priority, ranked.level, ranked.draw, ranked.available_at, ranked.id
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
    jobs.max_attempts, jobs.source_key, jobs.concurrency_class, jobs.parent_id, jobs.claimed_at,
    jobs.traceparent, jobs.workflow_id
