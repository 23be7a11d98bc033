-- A worker outcome: compare-and-set from processing, fenced by the generation attempt.
UPDATE code2wf
SET status = %(status)s::wf2des_status,
    result_url = coalesce(%(result_url)s, result_url),
    flag_count = %(flag_count)s,
    error_message = %(error_message)s,
    updated_by = %(actor)s
WHERE id = %(id)s
  AND status = '0'
  AND attempt = %(attempt)s
RETURNING status
