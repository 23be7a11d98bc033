-- Fenced output of media.process: runs in the transaction that completes the job. The state
-- only moves forward: an older revision never overwrites a newer one.
INSERT INTO media_processing_state AS state (media_id, revision, tags, job_id)
VALUES (%(media_id)s, %(revision)s, %(tags)s::jsonb, %(job_id)s)
ON CONFLICT (media_id) DO UPDATE SET
    revision = excluded.revision,
    tags = excluded.tags,
    job_id = excluded.job_id
WHERE state.revision <= excluded.revision
