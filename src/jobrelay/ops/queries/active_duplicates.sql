-- Every active row whose (type, dedupe_key) is shared with another active row.
SELECT
    j.id,
    j.type,
    j.dedupe_key,
    j.status,
    j.revision,
    j.payload,
    j.created_at
FROM jobs AS j
WHERE j.dedupe_key IS NOT NULL
  AND j.status IN ('pending', 'in_progress')
  AND EXISTS (
      SELECT 1 FROM jobs AS other
      WHERE other.type = j.type
        AND other.dedupe_key = j.dedupe_key
        AND other.id <> j.id
        AND other.status IN ('pending', 'in_progress')
  )
ORDER BY j.type, j.dedupe_key, j.created_at, j.id
FOR UPDATE
