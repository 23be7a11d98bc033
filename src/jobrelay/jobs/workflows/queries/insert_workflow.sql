-- A new workflow's row; its steps follow in the same transaction (insert_steps.sql).
INSERT INTO workflows (id, name, fairness_key)
VALUES (%(id)s, %(name)s, %(fairness_key)s)
RETURNING created_at
