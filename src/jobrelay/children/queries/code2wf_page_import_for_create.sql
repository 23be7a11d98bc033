-- The source Page Import as the caller's project sees it; locked so it cannot be deleted or
-- change state while the generation that depends on it is created.
SELECT id, organization_id, project_id, status, result_url, deleted_at
FROM page_import
WHERE id = %(page_import_id)s
  AND organization_id = %(organization_id)s
FOR SHARE
