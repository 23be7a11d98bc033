INSERT INTO jobs (id, type, payload, max_attempts)
VALUES (%(id)s, 'diag.noop', '{}'::jsonb, 1)
