-- A failed, not final attempt: keep the count, make the item due again after a delay.
UPDATE batch_item AS bi
SET lease_until = clock_timestamp() + make_interval(secs => s.delay_s),
    updated_by = %(actor)s
FROM unnest(%(ids)s::text[], %(attempts)s::int[], %(delays)s::float8[]) AS s (id, attempt, delay_s)
WHERE bi.id = s.id
  AND bi.dispatch_attempts = s.attempt
  AND bi.dispatched_at IS NULL
