"""`batch.cancel_settled_at`: a large batch's cancel finishes in the background.

Cancelling a batch marks every processing child and its item cancelled. Up to
`JOBRELAY_BATCH_CANCEL_INLINE_MAX` processing items that happens in the cancel's own
transaction (and `cancel_settled_at` is set with `cancelled_at`); above it the cancel sets
`cancelled_at` only, answers at once, and the relay's sweeper marks the children and items in
short transactions, then sets `cancel_settled_at`. Between the two the batch is already
cancelled for every writer: the relay claims nothing of it, a worker's webhook ends its child
cancelled, and the relay's terminal failure leaves its children to the sweep.

`batch_cancelling_idx` holds only the batches whose cancel is still settling, so the sweeper
finds them without reading the batch table. Batches cancelled before this migration were
settled in their cancel's transaction.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE batch ADD COLUMN cancel_settled_at timestamptz NULL")
    op.execute("UPDATE batch SET cancel_settled_at = cancelled_at WHERE cancelled_at IS NOT NULL")
    op.execute(
        "CREATE INDEX batch_cancelling_idx ON batch (cancelled_at) "
        "WHERE cancelled_at IS NOT NULL AND cancel_settled_at IS NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX batch_cancelling_idx")
    op.execute("ALTER TABLE batch DROP COLUMN cancel_settled_at")
