-- Soft delete of a batch, second statement: its children disappear from the API (the batch
-- and its items: `batches/queries/delete_batch.sql`, same transaction, the batch locked).
WITH pi AS (
    UPDATE page_import
    SET deleted_at = clock_timestamp(),
        deleted_by = %(actor)s,
        updated_by = %(actor)s
    WHERE batch_id = %(batch_id)s
      AND deleted_at IS NULL
    RETURNING 1
), cd AS (
    UPDATE code2des
    SET deleted_at = clock_timestamp(),
        deleted_by = %(actor)s,
        updated_by = %(actor)s
    WHERE batch_id = %(batch_id)s
      AND deleted_at IS NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM pi) + (SELECT count(*) FROM cd) AS deleted
