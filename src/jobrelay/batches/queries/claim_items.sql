-- Claim due items for one relay, fairly between organizations: lease them and count the
-- attempt, in one statement (the caller holds the claim lock, so claims do not overlap).
-- 1. `waiting`: the batches with undispatched items, one index probe per batch (a skip scan
--    of batch_item_waiting_idx), never a read of every waiting item. `ORDER BY batch_id, id`
--    is that index's order: no other index of batch_item can serve it, so the probe never
--    walks the dispatched items of finished batches in batch_item_batch_idx.
-- 2. `in_flight`: per organization, items claimed or sent whose child is not terminal
--    (batch_item_in_flight_idx; a send older than `in_flight_expiry_s` no longer counts).
-- 3. Each organization may hold `window` x its weight items in flight; this claim gives the
--    organizations with room a share of `limit` in proportion to their weights (round robin:
--    every claim serves every organization with room), oldest batch first within one. The
--    outer LIMIT keeps the total (shares are rounded up) and tells the planner the claim is
--    small, so the UPDATE finds its rows by primary key.
-- The last SELECT always returns one row: `held_back` counts organizations with waiting work
-- and no room, so an idle relay knows to look again soon (items settle without a NOTIFY).
-- Each item comes with its batch's `traceparent`, the parent of its send span.
-- Items are taken with the lock their UPDATE needs (NO KEY UPDATE) and SKIP LOCKED: an item
-- another transaction holds is left for a later claim, never waited for and never charged an
-- attempt; one held only FOR KEY SHARE (a foreign key check, a report) does not conflict
-- and is claimed. The UPDATE changes no counted column, so no count delta (and no lock on
-- the batch row) is involved.
WITH RECURSIVE waiting (batch_id) AS (
    (
        SELECT batch_id
        FROM batch_item
        WHERE dispatched_at IS NULL
          AND cancelled_at IS NULL
          AND error_message IS NULL
          AND deleted_at IS NULL
        ORDER BY batch_id, id
        LIMIT 1
    )
    UNION ALL
    SELECT (
        SELECT bi.batch_id
        FROM batch_item AS bi
        WHERE bi.dispatched_at IS NULL
          AND bi.cancelled_at IS NULL
          AND bi.error_message IS NULL
          AND bi.deleted_at IS NULL
          AND bi.batch_id > w.batch_id
        ORDER BY bi.batch_id, bi.id
        LIMIT 1
    )
    FROM waiting AS w
    WHERE w.batch_id IS NOT NULL
), orgs AS (
    SELECT b.organization_id, array_agg(b.id ORDER BY b.created_at, b.id) AS batch_ids
    FROM waiting AS w
    JOIN batch AS b ON b.id = w.batch_id
    -- a cancel still settling in the background (migration 0014): its items are not
    -- marked yet, the batch row already is
    WHERE b.cancelled_at IS NULL
    GROUP BY b.organization_id
), in_flight AS (
    SELECT b.organization_id, count(*) AS items
    FROM batch_item AS bi
    JOIN batch AS b ON b.id = bi.batch_id
    WHERE bi.lease_until IS NOT NULL
      AND bi.settled_at IS NULL
      AND bi.cancelled_at IS NULL
      AND bi.error_message IS NULL
      AND bi.deleted_at IS NULL
      AND (
          bi.dispatched_at > clock_timestamp() - make_interval(secs => %(in_flight_expiry_s)s)
          OR (bi.dispatched_at IS NULL AND bi.lease_until > clock_timestamp())
      )
      AND b.organization_id IN (SELECT organization_id FROM orgs)
    GROUP BY b.organization_id
), budget AS (
    SELECT o.organization_id,
           o.batch_ids,
           coalesce(wt.weight, 1.0) AS weight,
           ceil(%(window)s * coalesce(wt.weight, 1.0))::bigint - coalesce(f.items, 0) AS room
    FROM orgs AS o
    LEFT JOIN in_flight AS f ON f.organization_id = o.organization_id
    LEFT JOIN unnest(%(weight_orgs)s::bigint[], %(weights)s::float8[]) AS wt (organization_id, weight)
        ON wt.organization_id = o.organization_id
), shares AS (
    SELECT organization_id,
           batch_ids,
           least(room, ceil(%(limit)s * weight / sum(weight) OVER ())::bigint) AS take
    FROM budget
    WHERE room > 0
), due AS MATERIALIZED (
    SELECT picked.id
    FROM shares AS s
    CROSS JOIN LATERAL (
        SELECT bi.id
        FROM batch_item AS bi
        WHERE bi.batch_id = ANY (s.batch_ids)
          AND bi.dispatched_at IS NULL
          AND bi.cancelled_at IS NULL
          AND bi.error_message IS NULL
          AND bi.deleted_at IS NULL
          AND bi.dispatch_attempts < %(max_attempts)s
          AND (bi.lease_until IS NULL OR bi.lease_until <= clock_timestamp())
        ORDER BY bi.batch_id, bi.id
        LIMIT s.take
        FOR NO KEY UPDATE SKIP LOCKED
    ) AS picked
    LIMIT %(limit)s
), claimed AS (
    UPDATE batch_item AS bi
    SET lease_until = clock_timestamp() + make_interval(secs => %(lease_s)s),
        dispatch_attempts = bi.dispatch_attempts + 1,
        updated_by = %(actor)s
    FROM due
    WHERE bi.id = due.id
    RETURNING bi.id, bi.batch_id, bi.job_id, bi.dispatch_attempts, bi.message::text AS body
)
SELECT c.id,
       c.job_id,
       c.dispatch_attempts,
       c.body,
       b.traceparent,
       (SELECT count(*) FROM budget WHERE room <= 0) AS held_back
FROM (VALUES (1)) AS one (n)
LEFT JOIN claimed AS c ON true
LEFT JOIN batch AS b ON b.id = c.batch_id
