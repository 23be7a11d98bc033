COPY code2des (id, organization_id, project_id, batch_id, request, created_by, updated_by)
FROM STDIN
