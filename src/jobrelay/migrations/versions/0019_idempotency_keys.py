"""`idempotency_key`: the first answer of a creating POST sent with an `Idempotency-Key`.

A client that repeats a creation (a retry after a timeout, a double click) with the same key
gets the first answer back instead of a second resource; the same key with another request
is a 422. The row is written in the transaction that creates the resource, so a creation and
its key commit together or not at all, and concurrent repeats wait on the key's row. Keys
are per caller (`caller_sub`) and live 24 hours (`expires_at`); a sweep of the workers
deletes expired rows.

Expand only: a new table.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE idempotency_key (
            caller_sub text NOT NULL,
            key text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
            fingerprint text NOT NULL,
            status_code integer NOT NULL DEFAULT 0,
            response jsonb NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (caller_sub, key)
        )
        """
    )
    op.execute("CREATE INDEX idempotency_key_expires_at_idx ON idempotency_key (expires_at)")


def downgrade() -> None:
    op.execute("DROP TABLE idempotency_key")
