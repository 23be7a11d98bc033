-- Fenced output of source.sync: runs in the transaction that completes the job; only moves
-- forward in revision.
INSERT INTO source_sync_state AS state (source_id, sync_kind, revision, job_id)
VALUES (%(source_id)s, %(sync_kind)s, %(revision)s, %(job_id)s)
ON CONFLICT (source_id, sync_kind) DO UPDATE SET
    revision = excluded.revision,
    job_id = excluded.job_id
WHERE state.revision <= excluded.revision
