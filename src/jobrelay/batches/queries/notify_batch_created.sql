-- Wakes the relays (delivered at commit, dropped on rollback); they poll when nobody listens.
SELECT pg_notify('jobrelay_batch_items', %(batch_id)s)
