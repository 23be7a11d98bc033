-- The generations made from one Page Import (code2wf_page_import_id_idx), oldest first, at
-- most %(limit)s: the console's Page Import page links them.
SELECT *
FROM code2wf
WHERE page_import_id = %(page_import_id)s
  AND deleted_at IS NULL
ORDER BY id
LIMIT %(limit)s
