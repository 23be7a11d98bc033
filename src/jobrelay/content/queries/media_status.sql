-- The newest media.process job of each media id (ids are UUIDv7, so newest = largest id).
SELECT DISTINCT ON (payload ->> 'mediaId')
    payload ->> 'mediaId' AS media_id,
    id,
    status,
    revision,
    failure_kind
FROM all_jobs
WHERE type = 'media.process'
    AND payload ->> 'mediaId' = ANY(%(media_ids)s::text[])
ORDER BY payload ->> 'mediaId', id DESC
