-- Cancel, first statement: every processing child of the batch becomes '3'. Its items are
-- marked by `batches/queries/cancel_items_*.sql`, a separate statement: the count triggers
-- (migration 0012) count a statement by what it changed in one table, so a statement never
-- changes both an item and its child. Children first, like a webhook (child, then the item
-- read FOR SHARE).
WITH pi AS (
    UPDATE page_import
    SET status = '3',
        updated_by = %(actor)s
    WHERE batch_id = %(batch_id)s
      AND status = '0'
    RETURNING 1
), cd AS (
    UPDATE code2des
    SET status = '3',
        updated_by = %(actor)s
    WHERE batch_id = %(batch_id)s
      AND status = '0'
    RETURNING 1
)
SELECT (SELECT count(*) FROM pi) + (SELECT count(*) FROM cd) AS cancelled
