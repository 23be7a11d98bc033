COPY batch_item (id, batch_id, position, request, job_id, message, created_by, updated_by)
FROM STDIN
