-- Derived item states of one batch, counted (domain/batch_status.py has the same table).
-- Both child tables are read by their batch_id index; only the batch's type has rows.
WITH child AS (
    SELECT id, status FROM page_import WHERE batch_id = %(batch_id)s
    UNION ALL
    SELECT id, status FROM code2des WHERE batch_id = %(batch_id)s
), item AS (
    SELECT CASE
               WHEN c.status = '1' THEN 'completed'
               WHEN c.status = '2' THEN 'failed'
               WHEN c.status = '3' OR bi.cancelled_at IS NOT NULL THEN 'cancelled'
               WHEN bi.error_message IS NOT NULL THEN 'failed'
               WHEN bi.dispatched_at IS NOT NULL THEN 'running'
               ELSE 'queued'
           END AS state
    FROM batch_item AS bi
    JOIN child AS c ON c.id = bi.job_id
    WHERE bi.batch_id = %(batch_id)s
)
SELECT count(*) AS total,
       count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'running') AS running,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM item
