-- The batch row of `create_batch`; its items and children are copied in the same transaction.
INSERT INTO batch (id, organization_id, project_id, type, created_by, updated_by)
VALUES (%(id)s, %(organization_id)s, %(project_id)s, %(type)s, %(actor)s, %(actor)s)
RETURNING id, organization_id, project_id, type, cancelled_at, created_at, updated_at,
          created_by, updated_by
