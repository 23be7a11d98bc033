-- One page of a batch's items in input order (keyset on batch_item_batch_idx).
SELECT bi.id, bi.position, bi.job_id, bi.dispatched_at, bi.dispatch_attempts,
       bi.error_message AS dispatch_error, bi.cancelled_at,
       c.status AS child_status, c.error_message AS child_error, c.result_url
FROM batch_item AS bi
JOIN LATERAL (
    SELECT status, error_message, result_url FROM page_import WHERE id = bi.job_id
    UNION ALL
    SELECT status, error_message, result_url FROM code2des WHERE id = bi.job_id
) AS c ON true
WHERE bi.batch_id = %(batch_id)s
  AND bi.position > %(after)s
ORDER BY bi.position
LIMIT %(limit)s
