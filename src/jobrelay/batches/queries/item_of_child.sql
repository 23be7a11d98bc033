-- The batch item that carries one child (batch_item_status_idx): its dispatch state for the
-- console's child page.
SELECT id, position, dispatched_at, dispatch_attempts, error_message AS dispatch_error,
       cancelled_at, lease_until
FROM batch_item
WHERE batch_id = %(batch_id)s
  AND job_id = %(child_id)s
