-- The batches `verify-counts` checks, in id order from %(after)s (paging), %(limit)s at a
-- time; %(batch_id)s (not NULL) narrows it to one. The sampling sweep starts at a random
-- point of the id space (`after`) and takes the next few.
SELECT b.id, b.type
FROM batch AS b
WHERE (%(batch_id)s::text IS NULL OR b.id = %(batch_id)s)
  AND b.id > %(after)s
ORDER BY b.id
LIMIT %(limit)s
