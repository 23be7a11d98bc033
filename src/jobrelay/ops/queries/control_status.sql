SELECT
    c.claims_paused,
    c.enqueue_paused,
    c.reason,
    c.updated_at,
    c.updated_by,
    (SELECT count(*) FROM jobs AS j
     WHERE j.status = 'in_progress' AND j.lease_expires_at > clock_timestamp()) AS live_leases,
    (SELECT count(*) FROM jobs AS j
     WHERE j.status = 'in_progress' AND j.lease_expires_at <= clock_timestamp()) AS expired_leases,
    (SELECT coalesce(jsonb_object_agg(t.type, t.n), '{}'::jsonb)
     FROM (SELECT type, count(*) AS n FROM jobs WHERE status = 'pending' GROUP BY type) AS t
    ) AS pending_by_type
FROM jobs_control AS c
WHERE c.id
