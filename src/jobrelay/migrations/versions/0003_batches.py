"""Batch outbox: an index for the relay's claim of undispatched items.

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
"""

DOWNGRADE = r"""
DROP INDEX batch_item_due_idx;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
