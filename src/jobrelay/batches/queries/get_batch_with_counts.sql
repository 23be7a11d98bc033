-- A visible batch with its kept counts (the sum of its `batch_count_delta` rows), in one
-- statement: one snapshot, one round trip.
SELECT b.id, b.organization_id, b.project_id, b.type, b.cancelled_at, b.created_at,
       b.updated_at, b.created_by, b.updated_by,
       coalesce(d.total, 0) AS total,
       coalesce(d.queued, 0) AS queued,
       coalesce(d.running, 0) AS running,
       coalesce(d.completed, 0) AS completed,
       coalesce(d.failed, 0) AS failed,
       coalesce(d.cancelled, 0) AS cancelled
FROM batch AS b
LEFT JOIN LATERAL (
    SELECT sum(total) AS total, sum(queued) AS queued, sum(running) AS running,
           sum(completed) AS completed, sum(failed) AS failed, sum(cancelled) AS cancelled
    FROM batch_count_delta
    WHERE batch_id = b.id
) AS d ON true
WHERE b.id = %(batch_id)s
  AND b.deleted_at IS NULL
