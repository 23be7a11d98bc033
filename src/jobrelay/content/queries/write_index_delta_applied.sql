-- Fenced output of index.sync_delta: which media ids were applied by which job at which
-- revision; runs in the transaction that completes the job.
INSERT INTO index_delta_applied (index_name, media_id, job_id, job_revision)
SELECT %(index_name)s, media_id, %(job_id)s, %(revision)s
FROM unnest(%(media_ids)s::text[]) AS ids (media_id)
ON CONFLICT DO NOTHING
