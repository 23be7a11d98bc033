-- Keys past their 24 hours, a bounded batch per pass (the sweep runs again).
DELETE FROM idempotency_key
WHERE ctid = ANY (
    ARRAY(SELECT ctid FROM idempotency_key WHERE expires_at <= now() LIMIT %(limit)s)
)
