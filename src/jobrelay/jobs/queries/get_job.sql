SELECT * FROM all_jobs WHERE id = %(id)s
