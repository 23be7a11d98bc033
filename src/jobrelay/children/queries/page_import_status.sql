SELECT status FROM page_import WHERE id = %(id)s
