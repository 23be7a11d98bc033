-- The first delivery of a webhook-id inserts its row (a concurrent duplicate waits here for
-- this transaction, then finds the row); the row's answer is filled in before commit.
INSERT INTO webhook_delivery (webhook_id, body_sha256, status_code, response)
VALUES (%(webhook_id)s, %(body_sha256)s, 0, '{}'::jsonb)
ON CONFLICT (webhook_id) DO NOTHING
RETURNING webhook_id
