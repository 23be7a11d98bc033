INSERT INTO code2wf (
    id, organization_id, project_id, page_import_id, figma_file_key, screen_id,
    placement_target, created_by, updated_by
)
VALUES (
    %(id)s, %(organization_id)s, %(project_id)s, %(page_import_id)s, %(figma_file_key)s,
    %(screen_id)s, %(placement_target)s, %(actor)s, %(actor)s
)
RETURNING *
