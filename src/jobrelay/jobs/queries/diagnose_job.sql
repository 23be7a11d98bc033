-- Everything "why isn't this job running?" needs, read in one statement (one snapshot, one
-- database time `checked_at`): the job, the pause flags, the running job of its source, the
-- pending job of its source ahead of it, the running jobs holding its class's global slots,
-- its children by state, the workers serving its class, the job that replaced it (from the
-- reason duplicate reconciliation records), its parent, and its class's rate window (the
-- starts in the last period, and until when the class is rate limited when that many reach
-- the limit). No row: no such job.
-- A worker is live when its heartbeat is newer than %(stale_s)s seconds, or, when that is
-- NULL, than three of its own heartbeat intervals.
SELECT
    j.id,
    j.type,
    j.status,
    j.role,
    j.revision,
    j.priority,
    j.attempt_count,
    j.max_attempts,
    j.available_at,
    j.source_key,
    j.concurrency_class,
    j.claimed_by,
    j.claimed_at,
    j.lease_expires_at,
    j.heartbeat_at,
    j.failure_kind,
    j.last_error,
    j.finished_at,
    j.parent_id,
    clock.at AS checked_at,
    greatest(extract(EPOCH FROM j.available_at - clock.at), 0)::float8 AS wait_s,
    control.claims_paused,
    control.reason AS pause_reason,
    control.updated_by AS pause_updated_by,
    control.updated_at AS pause_updated_at,
    holder_worker.alive AS holder_alive,
    source_holder.id AS source_holder_id,
    source_holder.type AS source_holder_type,
    source_holder.claimed_by AS source_holder_claimed_by,
    source_holder.lease_expires_at AS source_holder_lease_expires_at,
    source_head.id AS source_head_id,
    source_head.type AS source_head_type,
    source_head.ahead AS source_ahead,
    class_slots.running AS class_running,
    class_slots.holders AS class_holders,
    (
        SELECT count(*)
        FROM (
            SELECT 1
            FROM jobs AS a
            WHERE a.status = 'pending'
                AND a.source_key IS NULL
                AND a.concurrency_class = j.concurrency_class
                AND a.available_at <= clock.at
                AND (a.priority, a.available_at, a.id) < (j.priority, j.available_at, j.id)
            LIMIT 10000
        ) AS bounded
    ) AS ahead_in_class,
    children.total AS children_total,
    children.active AS children_active,
    children.completed AS children_completed,
    children.failed AS children_failed,
    children.cancelled AS children_cancelled,
    workers.live_ids,
    workers.live_count,
    workers.live_of_class,
    workers.last_worker,
    workers.last_heartbeat_at,
    (
        SELECT count(*)
        FROM worker_heartbeat AS w
        WHERE w.heartbeat_at > clock.at
            - make_interval(secs => coalesce(%(stale_s)s, 3 * w.interval_s))
    ) AS live_workers_any_class,
    replaced.how AS replaced_how,
    replaced_job.id AS replaced_by_id,
    replaced_job.type AS replaced_by_type,
    replaced_job.status AS replaced_by_status,
    parent.status AS parent_status,
    parent.type AS parent_type,
    rate.max_starts AS rate_max_starts,
    rate.period_s AS rate_period_s,
    rate.in_window AS rate_in_window,
    rate.limited_until AS rate_limited_until
FROM all_jobs AS j
CROSS JOIN (SELECT clock_timestamp() AS at) AS clock
CROSS JOIN jobs_control AS control
LEFT JOIN LATERAL (
    SELECT w.heartbeat_at > clock.at
        - make_interval(secs => coalesce(%(stale_s)s, 3 * w.interval_s)) AS alive
    FROM worker_heartbeat AS w
    WHERE w.worker_id = j.claimed_by
) AS holder_worker ON TRUE
LEFT JOIN LATERAL (
    SELECT r.id, r.type, r.claimed_by, r.lease_expires_at
    FROM jobs AS r
    WHERE r.source_key = j.source_key
        AND r.status = 'in_progress'
        AND r.id <> j.id
    LIMIT 1
) AS source_holder ON j.source_key IS NOT NULL
LEFT JOIN LATERAL (
    SELECT a.id, a.type, count(*) OVER () AS ahead
    FROM jobs AS a
    WHERE a.source_key = j.source_key
        AND a.status = 'pending'
        AND a.id <> j.id
        AND a.available_at <= clock.at
        AND (a.priority, a.available_at, a.id) < (j.priority, j.available_at, j.id)
    ORDER BY a.priority, a.available_at, a.id
    LIMIT 1
) AS source_head ON j.source_key IS NOT NULL
CROSS JOIN LATERAL (
    SELECT
        count(*) AS running,
        coalesce(
            jsonb_agg(
                jsonb_build_object(
                    'id', h.id,
                    'type', h.type,
                    'claimed_by', h.claimed_by,
                    'lease_expires_at', h.lease_expires_at,
                    'class_slot', h.class_slot
                )
                ORDER BY h.class_slot
            ),
            '[]'::jsonb
        ) AS holders
    FROM jobs AS h
    WHERE h.status = 'in_progress'
        AND h.concurrency_class = j.concurrency_class
        AND h.class_slot IS NOT NULL
        AND h.id <> j.id
) AS class_slots
CROSS JOIN LATERAL (
    SELECT
        count(*) AS total,
        count(*) FILTER (WHERE c.status IN ('pending', 'in_progress')) AS active,
        count(*) FILTER (WHERE c.status = 'completed') AS completed,
        count(*) FILTER (WHERE c.status = 'failed') AS failed,
        count(*) FILTER (WHERE c.status = 'cancelled') AS cancelled
    FROM jobs AS c
    WHERE c.parent_id = j.id
) AS children
CROSS JOIN LATERAL (
    -- Workers of the job's class; those that serve its type too (job_types NULL: a worker
    -- of a release before migration 0016, which claims every type) can run it.
    SELECT
        (
            array_agg(w.worker_id ORDER BY w.heartbeat_at DESC) FILTER (
                WHERE w.alive AND w.serves_type
            )
        )[1:20] AS live_ids,
        count(*) FILTER (WHERE w.alive AND w.serves_type) AS live_count,
        count(*) FILTER (WHERE w.alive) AS live_of_class,
        (array_agg(w.worker_id ORDER BY w.heartbeat_at DESC) FILTER (WHERE w.serves_type))[1]
            AS last_worker,
        max(w.heartbeat_at) FILTER (WHERE w.serves_type) AS last_heartbeat_at
    FROM (
        SELECT
            w.worker_id,
            w.heartbeat_at,
            w.heartbeat_at > clock.at
                - make_interval(secs => coalesce(%(stale_s)s, 3 * w.interval_s)) AS alive,
            (w.job_types IS NULL OR j.type = ANY(w.job_types)) AS serves_type
        FROM worker_heartbeat AS w
        WHERE j.concurrency_class = ANY(w.classes)
    ) AS w
) AS workers
LEFT JOIN LATERAL (
    SELECT
        found.matched[1] AS how,
        found.matched[2]::uuid AS id
    FROM (
        SELECT regexp_match(
            j.last_error,
            '^(superseded by|merged into|duplicate of) '
            '([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$'
        ) AS matched
    ) AS found
    WHERE j.status = 'cancelled' AND found.matched IS NOT NULL
) AS replaced ON TRUE
LEFT JOIN all_jobs AS replaced_job ON replaced_job.id = replaced.id
LEFT JOIN all_jobs AS parent ON parent.id = j.parent_id
LEFT JOIN LATERAL (
    SELECT
        w.max_starts,
        w.period_s,
        cardinality(recent.starts) AS in_window,
        CASE
            WHEN cardinality(recent.starts) >= w.max_starts
                THEN recent.starts[cardinality(recent.starts) - w.max_starts + 1]
                + make_interval(secs => w.period_s)
        END AS limited_until
    FROM job_rate_windows AS w
    CROSS JOIN LATERAL (
        SELECT ARRAY(
            SELECT s.at
            FROM unnest(w.starts) AS s (at)
            WHERE s.at >= clock.at - make_interval(secs => w.period_s)
            ORDER BY s.at
        ) AS starts
    ) AS recent
    WHERE w.concurrency_class = j.concurrency_class
) AS rate ON TRUE
WHERE j.id = %(id)s
    AND control.id
