INSERT INTO organization (name, created_by, updated_by)
VALUES (%(name)s, %(actor)s, %(actor)s)
RETURNING id, name, created_at
