-- The first answer, stored in the transaction that created the resource.
UPDATE idempotency_key
SET status_code = %(status_code)s, response = %(response)s
WHERE caller_sub = %(caller_sub)s AND key = %(key)s
