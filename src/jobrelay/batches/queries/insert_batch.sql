-- The batch row of `create_batch`; its items and children are copied in the same transaction.
-- `traceparent`: the creating request's trace context (NULL when not traced), under which
-- the relay sends each item.
INSERT INTO batch (id, organization_id, project_id, type, created_by, updated_by, traceparent)
VALUES (
    %(id)s, %(organization_id)s, %(project_id)s, %(type)s, %(actor)s, %(actor)s,
    %(traceparent)s
)
RETURNING id, organization_id, project_id, type, cancelled_at, created_at, updated_at,
          created_by, updated_by
