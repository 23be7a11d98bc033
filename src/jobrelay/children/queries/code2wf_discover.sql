-- Plugin discovery: served by code2wf_org_project_file_status_idx, keyset on id (UUIDv7).
SELECT *
FROM code2wf
WHERE organization_id = %(organization_id)s
  AND project_id = %(project_id)s
  AND figma_file_key = %(figma_file_key)s
  AND (%(status)s::wf2des_status IS NULL OR status = %(status)s::wf2des_status)
  AND deleted_at IS NULL
  AND (%(after)s::varchar IS NULL OR id > %(after)s::varchar)
ORDER BY id
LIMIT %(limit)s
