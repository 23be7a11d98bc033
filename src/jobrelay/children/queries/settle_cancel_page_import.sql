-- One step of a background cancel of a page_import batch: up to %(limit)s processing children of
-- the batch become '3' (page_import_processing_idx), returning their ids for the batch's
-- settle_cancel_items.sql. A child a webhook holds is skipped; the next step finds it again
-- if it is still processing. (The same statement for the other child table:
-- settle_cancel_code2des.sql.)
UPDATE page_import
SET status = '3',
    updated_by = %(actor)s
WHERE id IN (
    SELECT id
    FROM page_import
    WHERE batch_id = %(batch_id)s
      AND status = '0'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id
