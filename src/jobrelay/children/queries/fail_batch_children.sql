-- The processing children of items that just failed for good (`batches/queries/
-- fail_items.sql`, the relay's and its sweep's) fail with the item's error; a child that
-- already ended keeps its end, and so does one of a batch whose cancel is settling in the
-- background (migration 0014): the sweeper ends it cancelled.
WITH failed AS (
    SELECT s.job_id, s.error
    FROM unnest(%(job_ids)s::text[], %(errors)s::text[]) AS s (job_id, error)
), pi AS (
    UPDATE page_import AS p
    SET status = '2',
        error_message = failed.error,
        updated_by = %(actor)s
    FROM failed
    WHERE p.id = failed.job_id
      AND p.status = '0'
      AND NOT EXISTS (
          SELECT 1 FROM batch AS b WHERE b.id = p.batch_id AND b.cancelled_at IS NOT NULL
      )
    RETURNING 1
), cd AS (
    UPDATE code2des AS c
    SET status = '2',
        error_message = failed.error,
        updated_by = %(actor)s
    FROM failed
    WHERE c.id = failed.job_id
      AND c.status = '0'
      AND NOT EXISTS (
          SELECT 1 FROM batch AS b WHERE b.id = c.batch_id AND b.cancelled_at IS NOT NULL
      )
    RETURNING 1
)
SELECT (SELECT count(*) FROM pi) + (SELECT count(*) FROM cd) AS failed
