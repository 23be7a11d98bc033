-- Take `key` for this request, or take over an expired row of it. A concurrent transaction
-- holding the same key makes this wait until it ends; no row back: the key is taken.
INSERT INTO idempotency_key AS held (caller_sub, key, fingerprint, expires_at)
VALUES (%(caller_sub)s, %(key)s, %(fingerprint)s, now() + make_interval(secs => %(ttl_s)s))
ON CONFLICT (caller_sub, key) DO UPDATE
    SET fingerprint = excluded.fingerprint,
        status_code = 0,
        response = NULL,
        created_at = now(),
        expires_at = excluded.expires_at
    WHERE held.expires_at <= now()
RETURNING key
