INSERT INTO ops_run (id, kind, ok, report, started_at, finished_at, created_by)
VALUES (%(id)s, %(kind)s, %(ok)s, %(report)s, %(started_at)s, %(finished_at)s, %(actor)s)
