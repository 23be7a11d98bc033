-- A merge into a running survivor bumps its revision, so its worker re-runs the new elements.
UPDATE jobs
SET payload = %(payload)s,
    revision = revision + 1
WHERE id = %(id)s
