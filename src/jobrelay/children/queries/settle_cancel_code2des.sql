-- One step of a background cancel of a code2des batch: up to %(limit)s processing children of
-- the batch become '3' (code2des_processing_idx), returning their ids for the batch's
-- settle_cancel_items.sql. A child a webhook holds is skipped; the next step finds it again
-- if it is still processing. (The same statement for the other child table:
-- settle_cancel_page_import.sql.)
UPDATE code2des
SET status = '3',
    updated_by = %(actor)s
WHERE id IN (
    SELECT id
    FROM code2des
    WHERE batch_id = %(batch_id)s
      AND status = '0'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id
