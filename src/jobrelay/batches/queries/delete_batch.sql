-- Soft delete: the batch and its items disappear from the API; the relay no longer claims
-- the items (its claim skips deleted rows). Its children are deleted by the next statement
-- (`children/queries/delete_batch_children.sql`, same transaction).
WITH b AS (
    UPDATE batch
    SET deleted_at = clock_timestamp(),
        deleted_by = %(actor)s,
        updated_by = %(actor)s,
        -- a cancel still settling in the background is settled by this delete (it cancels
        -- what has not ended), which takes the batch out of batch_cancelling_idx
        cancel_settled_at = CASE
            WHEN cancelled_at IS NOT NULL THEN coalesce(cancel_settled_at, clock_timestamp())
        END
    WHERE id = %(batch_id)s
      AND deleted_at IS NULL
    RETURNING id
), items AS (
    UPDATE batch_item
    SET deleted_at = clock_timestamp(),
        deleted_by = %(actor)s,
        updated_by = %(actor)s
    WHERE batch_id IN (SELECT id FROM b)
      AND deleted_at IS NULL
)
SELECT count(*) AS deleted FROM b
