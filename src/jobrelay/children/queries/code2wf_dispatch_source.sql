-- What the dispatch job sends: the generation (deleted or not) and the location of its Page
-- Import result.
SELECT c.*, p.result_url AS page_import_result_url
FROM code2wf AS c
JOIN page_import AS p ON p.id = c.page_import_id
WHERE c.id = %(id)s
