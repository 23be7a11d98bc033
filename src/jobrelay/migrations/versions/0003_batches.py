"""Batch outbox: indexes for the relay's claim and for the derived status aggregate.

The relay claims items that are not dispatched, not cancelled, not failed and not deleted.
Those are few next to the dispatched history, so a partial index on `id` (UUIDv7, creation
order) keeps the claim proportional to the backlog, not to the table.

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-30
"""

from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE INDEX batch_item_due_idx ON batch_item (id)
    WHERE dispatched_at IS NULL AND cancelled_at IS NULL AND error_message IS NULL
      AND deleted_at IS NULL;

-- The status aggregate reads one batch's items and children from these alone (index-only
-- scans once the pages are all-visible), never the wide request/message columns.
CREATE INDEX batch_item_status_idx ON batch_item (batch_id, job_id)
    INCLUDE (dispatched_at, cancelled_at, error_message);
CREATE INDEX page_import_batch_status_idx ON page_import (batch_id, id) INCLUDE (status);
CREATE INDEX code2des_batch_status_idx ON code2des (batch_id, id) INCLUDE (status);
"""

DOWNGRADE = r"""
DROP INDEX batch_item_due_idx, batch_item_status_idx, page_import_batch_status_idx,
    code2des_batch_status_idx;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
