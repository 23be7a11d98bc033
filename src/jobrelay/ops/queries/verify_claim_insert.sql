-- First in line for the next claim: the lowest priority value, available now.
INSERT INTO jobs (id, type, payload, max_attempts, priority, available_at)
VALUES (%(id)s, 'diag.noop', '{}'::jsonb, 1, -32768, clock_timestamp() - interval '1 second')
