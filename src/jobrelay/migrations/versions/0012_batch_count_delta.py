"""Batch status counts kept in the transactions that change a child: `batch_count_delta`.

A batch's status is still derived from its items and children (docs/explanation/batches.md,
derived status); what changes is when the counting happens. Every statement that inserts
items or children, that ends a child (`status`) or that records a send
(`batch_item.dispatched_at`) appends, in the same transaction, one row per batch it touched
holding the change of each count (statement triggers over the transition tables). A batch's
counts are the sum of its rows: reading the status of a 100,000-item batch sums a few dozen
rows instead of joining 200,000.

Append-only deltas, not one counter row per batch: concurrent webhooks of one batch insert
their own rows and never wait for each other (one counter row would serialize them, and
striped counter rows could deadlock with the child and item locks the same transactions
hold). Now and then (1 in 32 statements per batch) the writer folds the batch's rows into
one, under a transaction-level advisory lock that a second folder skips instead of waiting
for.

How an item is counted: exactly as the recount (`batches/queries/batch_counts.sql`, kept as
the checker) and `jobrelay.domain.batch_status.item_state`. A trigger sees one table: the item
trigger reads the child's current status, the child trigger the item's current columns. So
no statement may change an item and its child together (both triggers would see the other
side's new value); cancel and the relay's final failure therefore run two statements
(items or children first, then the other side). The consistency test
(`tests/integration/test_batch_counts_consistency.py`) holds counts and recount together
under concurrent writers.

Concurrent transactions: the child trigger reads the items it counts `FOR SHARE`, so an item
change committed concurrently either commits first and is seen, or waits for the child's
transaction and then sees the ended child (an ended child alone decides the state, so the
item trigger then counts nothing).

The `(batch_id, id) INCLUDE (status)` indexes of the children served only the old status
aggregate; without them a child's status change is a HOT update (no index entries), which
cancel and every webhook do.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE batch_count_delta (
    batch_id varchar(255) NOT NULL REFERENCES batch (id) ON DELETE CASCADE,
    total bigint NOT NULL DEFAULT 0,
    queued bigint NOT NULL DEFAULT 0,
    running bigint NOT NULL DEFAULT 0,
    completed bigint NOT NULL DEFAULT 0,
    failed bigint NOT NULL DEFAULT 0,
    cancelled bigint NOT NULL DEFAULT 0
);
CREATE INDEX batch_count_delta_batch_idx ON batch_count_delta (batch_id);

-- Fold one batch's delta rows into one. A concurrent folder of the same batch skips (it does
-- not wait), so folders never wait for each other while holding other locks.
CREATE FUNCTION jobrelay_batch_count_fold(p_batch_id varchar) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('batch_count_delta'), hashtext(p_batch_id)) THEN
        RETURN;
    END IF;
    WITH gone AS (
        DELETE FROM batch_count_delta WHERE batch_id = p_batch_id
        RETURNING total, queued, running, completed, failed, cancelled
    )
    INSERT INTO batch_count_delta (batch_id, total, queued, running, completed, failed,
                                   cancelled)
    SELECT p_batch_id, sum(total), sum(queued), sum(running), sum(completed), sum(failed),
           sum(cancelled)
    FROM gone
    HAVING count(*) > 0;
END
$$;

-- Append the deltas of one statement (a temporary result `d`), then fold now and then.
CREATE FUNCTION jobrelay_batch_count_append(
    p_batch_ids varchar[], p_total bigint[], p_queued bigint[], p_running bigint[],
    p_completed bigint[], p_failed bigint[], p_cancelled bigint[]
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO batch_count_delta (batch_id, total, queued, running, completed, failed,
                                   cancelled)
    SELECT * FROM unnest(p_batch_ids, p_total, p_queued, p_running, p_completed, p_failed,
                         p_cancelled) AS d (batch_id, total, queued, running, completed,
                                            failed, cancelled)
    WHERE d.total <> 0 OR d.queued <> 0 OR d.running <> 0 OR d.completed <> 0
       OR d.failed <> 0 OR d.cancelled <> 0;
    PERFORM jobrelay_batch_count_fold(b)
    FROM unnest(p_batch_ids) AS b
    WHERE random() < 1.0 / 32;
END
$$;

-- The state of one item (docs/explanation/batches.md, derived status;
-- `jobrelay.domain.batch_status.item_state`),
-- inlined into the queries below.
CREATE FUNCTION jobrelay_batch_item_state(
    child_status wf2des_status, dispatched boolean, dispatch_failed boolean, cancelled boolean
) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN child_status = '1' THEN 'completed'
        WHEN child_status = '2' THEN 'failed'
        WHEN child_status = '3' THEN 'cancelled'
        WHEN child_status <> '0' THEN 'other'
        WHEN cancelled THEN 'cancelled'
        WHEN dispatch_failed THEN 'failed'
        WHEN dispatched THEN 'running'
        ELSE 'queued'
    END
$$;

-- Append per-batch deltas from parallel arrays of (batch id, old state, new state): an old
-- state NULL is an item counted for the first time (total + 1).
CREATE FUNCTION jobrelay_batch_count_moves(
    p_batch_ids varchar[], p_old_states text[], p_new_states text[]
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobrelay_batch_count_append(
        array_agg(batch_id), array_agg(total), array_agg(queued), array_agg(running),
        array_agg(completed), array_agg(failed), array_agg(cancelled))
    FROM (
        SELECT m.batch_id,
               count(*) FILTER (WHERE m.old_state IS NULL) AS total,
               count(*) FILTER (WHERE m.new_state = 'queued')
                   - count(*) FILTER (WHERE m.old_state = 'queued') AS queued,
               count(*) FILTER (WHERE m.new_state = 'running')
                   - count(*) FILTER (WHERE m.old_state = 'running') AS running,
               count(*) FILTER (WHERE m.new_state = 'completed')
                   - count(*) FILTER (WHERE m.old_state = 'completed') AS completed,
               count(*) FILTER (WHERE m.new_state = 'failed')
                   - count(*) FILTER (WHERE m.old_state = 'failed') AS failed,
               count(*) FILTER (WHERE m.new_state = 'cancelled')
                   - count(*) FILTER (WHERE m.old_state = 'cancelled') AS cancelled
        FROM unnest(p_batch_ids, p_old_states, p_new_states) AS m (batch_id, old_state,
                                                                    new_state)
        WHERE m.old_state IS DISTINCT FROM m.new_state
        GROUP BY m.batch_id
        ORDER BY m.batch_id
    ) AS d
    HAVING count(*) > 0;
END
$$;

-- New children whose items already exist (creation copies the children first: usually none).
CREATE FUNCTION jobrelay_batch_count_child_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- EXECUTE: planned for this statement's transition tables (a cached plan made for
    -- a one-row webhook would join a 100,000-row cancel by nested loops).
    EXECUTE $q$
    SELECT jobrelay_batch_count_moves(array_agg(bi.batch_id), array_agg(NULL::text),
        array_agg(jobrelay_batch_item_state(n.status, bi.dispatched_at IS NOT NULL,
                                            bi.error_message IS NOT NULL,
                                            bi.cancelled_at IS NOT NULL)))
    FROM new_rows AS n
    JOIN batch_item AS bi ON bi.batch_id = n.batch_id AND bi.job_id = n.id
    WHERE n.batch_id IS NOT NULL
    HAVING count(*) > 0
    $q$;
    RETURN NULL;
END
$$;

-- New items whose children exist (the usual order of creation).
CREATE FUNCTION jobrelay_batch_count_item_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- EXECUTE: planned for this statement's transition tables (a cached plan made for
    -- a one-row webhook would join a 100,000-row cancel by nested loops).
    EXECUTE $q$
    SELECT jobrelay_batch_count_moves(array_agg(n.batch_id), array_agg(NULL::text),
        array_agg(jobrelay_batch_item_state(c.status, n.dispatched_at IS NOT NULL,
                                            n.error_message IS NOT NULL,
                                            n.cancelled_at IS NOT NULL)))
    FROM new_rows AS n
    JOIN (
        SELECT p.batch_id, p.id, p.status FROM page_import AS p
        WHERE p.batch_id IN (SELECT batch_id FROM new_rows)
        UNION ALL
        SELECT c2.batch_id, c2.id, c2.status FROM code2des AS c2
        WHERE c2.batch_id IN (SELECT batch_id FROM new_rows)
    ) AS c ON c.batch_id = n.batch_id AND c.id = n.job_id
    HAVING count(*) > 0
    $q$;
    RETURN NULL;
END
$$;

-- An item's dispatch, dispatch failure or cancel changed: it moves between states while its
-- child is processing. The child's current status is read; an ended child decides alone.
CREATE FUNCTION jobrelay_batch_count_item_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- EXECUTE: planned for this statement's transition tables (a cached plan made for
    -- a one-row webhook would join a 100,000-row cancel by nested loops).
    EXECUTE $q$
    SELECT jobrelay_batch_count_moves(array_agg(n.batch_id),
        array_agg(jobrelay_batch_item_state(c.status, o.dispatched_at IS NOT NULL,
                                            o.error_message IS NOT NULL,
                                            o.cancelled_at IS NOT NULL)),
        array_agg(jobrelay_batch_item_state(c.status, n.dispatched_at IS NOT NULL,
                                            n.error_message IS NOT NULL,
                                            n.cancelled_at IS NOT NULL)))
    FROM old_rows AS o
    JOIN new_rows AS n ON n.id = o.id
    JOIN LATERAL (
        SELECT p.status FROM page_import AS p WHERE p.id = n.job_id
        UNION ALL
        SELECT c2.status FROM code2des AS c2 WHERE c2.id = n.job_id
    ) AS c ON c.status = '0'
    WHERE (o.dispatched_at IS NULL) <> (n.dispatched_at IS NULL)
       OR (o.error_message IS NULL) <> (n.error_message IS NULL)
       OR (o.cancelled_at IS NULL) <> (n.cancelled_at IS NULL)
    HAVING count(*) > 0
    $q$;
    RETURN NULL;
END
$$;

-- A child's status changed (a webhook's outcome, the relay's final failure, a cancel): its
-- item leaves the state it had under the old status for the one under the new status. The
-- item is read FOR SHARE: a change of the item being committed concurrently commits first
-- and is seen here (or waits for this transaction and then sees the ended child).
CREATE FUNCTION jobrelay_batch_count_child_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- EXECUTE: planned for this statement's transition tables (a cached plan made for
    -- a one-row webhook would join a 100,000-row cancel by nested loops).
    EXECUTE $q$
    SELECT jobrelay_batch_count_moves(array_agg(ch.batch_id),
        array_agg(jobrelay_batch_item_state(ch.old_status, ch.dispatched, ch.dispatch_failed,
                                            ch.cancelled)),
        array_agg(jobrelay_batch_item_state(ch.new_status, ch.dispatched, ch.dispatch_failed,
                                            ch.cancelled)))
    FROM (
        SELECT bi.batch_id, o.status AS old_status, n.status AS new_status,
               bi.dispatched_at IS NOT NULL AS dispatched,
               bi.error_message IS NOT NULL AS dispatch_failed,
               bi.cancelled_at IS NOT NULL AS cancelled
        FROM old_rows AS o
        JOIN new_rows AS n ON n.id = o.id
        JOIN batch_item AS bi ON bi.batch_id = n.batch_id AND bi.job_id = n.id
        WHERE o.status <> n.status
          AND n.batch_id IS NOT NULL
        FOR SHARE OF bi
    ) AS ch
    HAVING count(*) > 0
    $q$;
    RETURN NULL;
END
$$;

CREATE TRIGGER page_import_batch_count_insert AFTER INSERT ON page_import
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_batch_count_child_insert();
CREATE TRIGGER code2des_batch_count_insert AFTER INSERT ON code2des
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_batch_count_child_insert();
CREATE TRIGGER page_import_batch_count_update AFTER UPDATE ON page_import
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_batch_count_child_update();
CREATE TRIGGER code2des_batch_count_update AFTER UPDATE ON code2des
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_batch_count_child_update();
CREATE TRIGGER batch_item_batch_count_insert AFTER INSERT ON batch_item
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_batch_count_item_insert();
CREATE TRIGGER batch_item_batch_count_update AFTER UPDATE ON batch_item
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobrelay_batch_count_item_update();

-- The batches that exist already, counted once.
INSERT INTO batch_count_delta (batch_id, total, queued, running, completed, failed, cancelled)
SELECT s.batch_id, count(*),
       count(*) FILTER (WHERE s.state = 'queued'),
       count(*) FILTER (WHERE s.state = 'running'),
       count(*) FILTER (WHERE s.state = 'completed'),
       count(*) FILTER (WHERE s.state = 'failed'),
       count(*) FILTER (WHERE s.state = 'cancelled')
FROM (
    SELECT bi.batch_id,
           jobrelay_batch_item_state(c.status, bi.dispatched_at IS NOT NULL,
                                     bi.error_message IS NOT NULL,
                                     bi.cancelled_at IS NOT NULL) AS state
    FROM batch_item AS bi
    JOIN (
        SELECT id, status FROM page_import
        UNION ALL
        SELECT id, status FROM code2des
    ) AS c ON c.id = bi.job_id
) AS s
GROUP BY s.batch_id;

DROP INDEX page_import_batch_status_idx, code2des_batch_status_idx;

-- Room on each page for the one update a child gets (its end): with no index on the columns
-- it sets, that update stays on the page (HOT) and adds no index entries.
ALTER TABLE page_import SET (fillfactor = 85);
ALTER TABLE code2des SET (fillfactor = 85);
"""

DOWNGRADE = r"""
ALTER TABLE page_import RESET (fillfactor);
ALTER TABLE code2des RESET (fillfactor);
CREATE INDEX page_import_batch_status_idx ON page_import (batch_id, id) INCLUDE (status);
CREATE INDEX code2des_batch_status_idx ON code2des (batch_id, id) INCLUDE (status);
DROP TRIGGER page_import_batch_count_insert ON page_import;
DROP TRIGGER code2des_batch_count_insert ON code2des;
DROP TRIGGER page_import_batch_count_update ON page_import;
DROP TRIGGER code2des_batch_count_update ON code2des;
DROP TRIGGER batch_item_batch_count_insert ON batch_item;
DROP TRIGGER batch_item_batch_count_update ON batch_item;
DROP FUNCTION jobrelay_batch_count_child_update(), jobrelay_batch_count_item_update(),
    jobrelay_batch_count_item_insert(), jobrelay_batch_count_child_insert(),
    jobrelay_batch_count_moves(varchar[], text[], text[]),
    jobrelay_batch_item_state(wf2des_status, boolean, boolean, boolean),
    jobrelay_batch_count_append(varchar[], bigint[], bigint[], bigint[], bigint[], bigint[],
                                bigint[]),
    jobrelay_batch_count_fold(varchar);
DROP TABLE batch_count_delta;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
