-- Cancel, second statement: the items of the batch's cancelled children (only cancel ends a
-- child with '3') are marked cancelled, so the relay never sends them.
UPDATE batch_item AS bi
SET cancelled_at = clock_timestamp(),
    updated_by = %(actor)s
WHERE bi.batch_id = %(batch_id)s
  AND bi.cancelled_at IS NULL
  AND bi.job_id IN (
      SELECT p.id FROM page_import AS p WHERE p.batch_id = %(batch_id)s AND p.status = '3'
      UNION ALL
      SELECT c.id FROM code2des AS c WHERE c.batch_id = %(batch_id)s AND c.status = '3'
  )
