-- Dispatch gave up: the generation fails with a safe message (a new POST retries it).
UPDATE code2wf
SET status = '2',
    error_message = %(error_message)s,
    updated_by = 'worker'
WHERE id = %(id)s
  AND status = '0'
