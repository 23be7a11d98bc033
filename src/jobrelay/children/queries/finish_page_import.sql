-- Terminal outcome of a Page Import: a compare-and-set from processing ('0'). A child of a
-- cancelled batch whose cancel is still settling in the background (migration 0014) ends
-- cancelled instead, keeping nothing of the outcome: as if the cancel had reached it first.
UPDATE page_import AS p
SET status = CASE WHEN b.cancelled THEN '3' ELSE %(status)s::wf2des_status END,
    result_url = CASE WHEN b.cancelled THEN p.result_url ELSE %(result_url)s END,
    manifest_hash = CASE WHEN b.cancelled THEN p.manifest_hash ELSE %(manifest_hash)s END,
    error_message = CASE WHEN b.cancelled THEN p.error_message ELSE %(error_message)s END,
    updated_by = %(actor)s
FROM (
    SELECT EXISTS (
        SELECT 1
        FROM page_import AS c
        JOIN batch AS bt ON bt.id = c.batch_id
        WHERE c.id = %(id)s
          AND bt.cancelled_at IS NOT NULL
    ) AS cancelled
) AS b
WHERE p.id = %(id)s
  AND p.status = '0'
RETURNING p.status
