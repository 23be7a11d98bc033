-- Jobs finished in the last hour per (type, status), with those of the last 5 minutes,
-- read from finished_jobs_finished_at_idx (cost: the jobs finished in the hour).
SELECT j.type,
       j.status,
       count(*) AS last_60m,
       count(*) FILTER (
           WHERE j.finished_at > clock.at - make_interval(mins => 5)
       ) AS last_5m
FROM all_jobs AS j
CROSS JOIN (SELECT clock_timestamp() AS at) AS clock
WHERE j.finished_at > clock.at - make_interval(mins => 60)
  AND j.status IN ('completed', 'failed', 'cancelled')
GROUP BY j.type, j.status
ORDER BY j.type, j.status
