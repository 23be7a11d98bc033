-- A jobs worker stopping cleanly removes its heartbeat row.
DELETE FROM worker_heartbeat WHERE worker_id = %(worker_id)s
