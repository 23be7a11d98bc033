-- Cancel, second statement, for a code2des batch (cancel_items_page_import.sql is the same
-- for the other child table): the items of the batch's cancelled children (only cancel ends
-- a child with '3') are marked cancelled, so the relay never sends them. The child's status
-- is read per item through its primary key (a scalar subquery is never turned into a join):
-- linear in the batch whatever the planner estimates for a batch it has no statistics for
-- yet (as a join, a fresh batch estimated at one row rescanned its children for every item:
-- quadratic).
UPDATE batch_item AS bi
SET cancelled_at = clock_timestamp(),
    updated_by = %(actor)s
WHERE bi.batch_id = %(batch_id)s
  AND bi.cancelled_at IS NULL
  AND (SELECT c.status FROM code2des AS c WHERE c.id = bi.job_id) = '3'
