-- One step of a background cancel: up to %(limit)s processing children of the batch become
-- '3' (page_import_processing_idx / code2des_processing_idx), returning their ids for
-- settle_cancel_items.sql. {child} is the batch's child table, bound as an identifier. A child
-- a webhook holds is skipped; the next step finds it again if it is still processing.
UPDATE {child}
SET status = '3',
    updated_by = %(actor)s
WHERE id IN (
    SELECT id
    FROM {child}
    WHERE batch_id = %(batch_id)s
      AND status = '0'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id
