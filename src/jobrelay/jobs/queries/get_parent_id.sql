SELECT parent_id FROM jobs WHERE id = %(id)s
