"""Fair dispatch in the batch outbox: what the relay needs to count work in flight.

- `batch_item.settled_at`: set when the item's child reaches a terminal outcome ('1'
  completed, '2' failed), by a trigger on `page_import` and `code2des`, in the same
  transaction as the webhook (or any other writer) that finishes the child. Cancelled
  children need nothing: cancel sets `batch_item.cancelled_at` in its own statement.
- `batch_item_in_flight_idx`: the items that hold a slot of their organization's window
  (claimed or sent, not settled, cancelled or failed). It holds at most the windows of the
  organizations plus sends whose outcome never came, so counting it per claim is cheap.
- `batch_item_waiting_idx`: undispatched items by batch, so a claim finds the batches with
  waiting work by skipping from one batch to the next instead of reading every item.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE batch_item ADD COLUMN settled_at timestamptz NULL")
    op.execute(
        """
        CREATE INDEX batch_item_in_flight_idx ON batch_item (batch_id)
        INCLUDE (dispatched_at, lease_until)
        WHERE lease_until IS NOT NULL AND settled_at IS NULL AND cancelled_at IS NULL
          AND error_message IS NULL AND deleted_at IS NULL
        """
    )
    op.execute(
        """
        CREATE INDEX batch_item_waiting_idx ON batch_item (batch_id, id)
        WHERE dispatched_at IS NULL AND cancelled_at IS NULL AND error_message IS NULL
          AND deleted_at IS NULL
        """
    )
    op.execute(
        """
        CREATE FUNCTION batch_item_settle() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE batch_item
            SET settled_at = clock_timestamp()
            WHERE batch_id = NEW.batch_id
              AND job_id = NEW.id
              AND settled_at IS NULL
              AND error_message IS NULL
              AND cancelled_at IS NULL;
            RETURN NULL;
        END
        $$
        """
    )
    for table in ("page_import", "code2des"):
        op.execute(
            f"""
            CREATE TRIGGER {table}_settles_batch_item
            AFTER UPDATE OF status ON {table}
            FOR EACH ROW
            WHEN (OLD.status = '0' AND NEW.status IN ('1', '2') AND NEW.batch_id IS NOT NULL)
            EXECUTE FUNCTION batch_item_settle()
            """
        )


def downgrade() -> None:
    for table in ("page_import", "code2des"):
        op.execute(f"DROP TRIGGER {table}_settles_batch_item ON {table}")
    op.execute("DROP FUNCTION batch_item_settle()")
    op.execute("DROP INDEX batch_item_waiting_idx")
    op.execute("DROP INDEX batch_item_in_flight_idx")
    op.execute("ALTER TABLE batch_item DROP COLUMN settled_at")
