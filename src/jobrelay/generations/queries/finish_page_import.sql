-- Terminal outcome of a Page Import: a compare-and-set from processing ('0').
UPDATE page_import
SET status = %(status)s::wf2des_status,
    result_url = %(result_url)s,
    manifest_hash = %(manifest_hash)s,
    error_message = %(error_message)s,
    updated_by = %(actor)s
WHERE id = %(id)s
  AND status = '0'
RETURNING status
