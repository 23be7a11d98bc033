-- For the rest of the caller's transaction only (is_local): a statement that waits longer
-- than this for another transaction's lock fails with LockNotAvailable (55P03) instead of
-- queueing, so one row held by someone else never stalls the writer. Local, so it is safe
-- through a transaction pooler.
SELECT set_config('lock_timeout', %(timeout)s, true)
