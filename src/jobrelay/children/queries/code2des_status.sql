SELECT status FROM code2des WHERE id = %(id)s
