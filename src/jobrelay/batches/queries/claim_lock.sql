-- Claims take turns (held to the end of the claim's transaction): the next claim's snapshot
-- sees the leases of the previous one, so an organization's window is never overshot.
SELECT pg_advisory_xact_lock(hashtext('jobrelay.relay.claim'))
