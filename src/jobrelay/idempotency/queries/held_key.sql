-- The committed answer of a key another request took.
SELECT fingerprint, status_code, response, created_at
FROM idempotency_key
WHERE caller_sub = %(caller_sub)s AND key = %(key)s
