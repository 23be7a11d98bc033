-- SQS accepted these messages: record it, unless the claim was lost (another attempt since).
UPDATE batch_item AS bi
SET dispatched_at = clock_timestamp(),
    updated_by = %(actor)s
FROM unnest(%(ids)s::text[], %(attempts)s::int[]) AS s (id, attempt)
WHERE bi.id = s.id
  AND bi.dispatch_attempts = s.attempt
  AND bi.dispatched_at IS NULL
