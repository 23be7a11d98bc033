-- The counts of one batch as kept by the count triggers (migration 0012): the sum of its
-- delta rows, a few dozen at most between folds. `batch_counts_*.sql` recount the same from
-- the items and children (the checker).
SELECT coalesce(sum(total), 0) AS total,
       coalesce(sum(queued), 0) AS queued,
       coalesce(sum(running), 0) AS running,
       coalesce(sum(completed), 0) AS completed,
       coalesce(sum(failed), 0) AS failed,
       coalesce(sum(cancelled), 0) AS cancelled
FROM batch_count_delta
WHERE batch_id = %(batch_id)s
