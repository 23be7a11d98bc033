-- Maintenance DDL waits at most this long for a lock (then the pass tries again later),
-- so it never queues the statements of workers and the API behind a long reader.
SELECT set_config('lock_timeout', %(timeout)s, true)
