-- Terminal outcome of a Code2Des: a compare-and-set from processing ('0'). A child of a
-- cancelled batch whose cancel is still settling (finish_page_import.sql) ends cancelled.
UPDATE code2des AS p
SET status = CASE WHEN b.cancelled THEN '3' ELSE %(status)s::wf2des_status END,
    result_url = CASE WHEN b.cancelled THEN p.result_url ELSE %(result_url)s END,
    error_message = CASE WHEN b.cancelled THEN p.error_message ELSE %(error_message)s END,
    updated_by = %(actor)s
FROM (
    SELECT EXISTS (
        SELECT 1
        FROM code2des AS c
        JOIN batch AS bt ON bt.id = c.batch_id
        WHERE c.id = %(id)s
          AND bt.cancelled_at IS NOT NULL
    ) AS cancelled
) AS b
WHERE p.id = %(id)s
  AND p.status = '0'
RETURNING p.status
