-- The checker: the derived item states of one batch, recounted from the items and children
-- (domain/batch_status.py has the same table). The API reads the counts kept by the count
-- triggers (`batch_counts_kept.sql`); the consistency test compares the two.
-- This one counts a page_import batch; batch_counts_code2des.sql is the same for the other
-- child table.
SELECT count(*) AS total,
       count(*) FILTER (WHERE c.status = '0' AND bi.cancelled_at IS NULL
                        AND bi.error_message IS NULL AND bi.dispatched_at IS NULL) AS queued,
       count(*) FILTER (WHERE c.status = '0' AND bi.cancelled_at IS NULL
                        AND bi.error_message IS NULL AND bi.dispatched_at IS NOT NULL) AS running,
       count(*) FILTER (WHERE c.status = '1') AS completed,
       count(*) FILTER (WHERE c.status = '2'
                        OR (c.status = '0' AND bi.cancelled_at IS NULL
                            AND bi.error_message IS NOT NULL)) AS failed,
       count(*) FILTER (WHERE c.status = '3'
                        OR (c.status = '0' AND bi.cancelled_at IS NOT NULL)) AS cancelled
FROM batch_item AS bi
JOIN page_import AS c ON c.batch_id = bi.batch_id AND c.id = bi.job_id
WHERE bi.batch_id = %(batch_id)s
  AND c.batch_id = %(batch_id)s
