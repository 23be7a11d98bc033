-- What the dispatch job sends: the generation and the location of its Page Import result.
SELECT c.id, c.organization_id, c.project_id, c.page_import_id, c.figma_file_key,
       c.screen_id, c.placement_target, c.status, c.attempt, c.deleted_at,
       p.result_url AS page_import_result_url
FROM code2wf AS c
JOIN page_import AS p ON p.id = c.page_import_id
WHERE c.id = %(id)s
