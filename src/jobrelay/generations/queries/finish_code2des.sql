-- Terminal outcome of a Code2Des: a compare-and-set from processing ('0').
UPDATE code2des
SET status = %(status)s::wf2des_status,
    result_url = %(result_url)s,
    error_message = %(error_message)s,
    updated_by = %(actor)s
WHERE id = %(id)s
  AND status = '0'
RETURNING status
