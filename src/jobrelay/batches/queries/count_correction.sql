-- A correction of a batch's kept counts (issue 24, `jobrelay ops verify-counts --repair`):
-- one more delta row, the recount minus the kept counts as both were in one snapshot.
-- Deltas add up, so writers that commit after that snapshot keep appending their own
-- changes on top and the sum stays the derivation.
INSERT INTO batch_count_delta (batch_id, total, queued, running, completed, failed, cancelled)
VALUES (%(batch_id)s, %(total)s, %(queued)s, %(running)s, %(completed)s, %(failed)s,
        %(cancelled)s)
