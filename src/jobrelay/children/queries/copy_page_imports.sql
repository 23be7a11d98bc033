COPY page_import (id, organization_id, project_id, batch_id, request, created_by, updated_by)
FROM STDIN
