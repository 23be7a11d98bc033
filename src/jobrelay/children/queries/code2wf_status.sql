SELECT status, attempt
FROM code2wf
WHERE id = %(id)s
