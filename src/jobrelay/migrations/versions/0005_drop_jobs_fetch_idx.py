"""Drop `jobs_fetch_idx`: the claim reads pending jobs per class from
`jobs_pending_class_idx` and per source from `jobs_pending_source_idx`.

With both indexes present the planner could read a class's pending jobs from
`jobs_fetch_idx (priority, available_at, id)`, which has the same order but not the class:
claiming a class with no pending job then walked every pending job of the other classes
(measured: 25 ms per claim with 200,000 pending `default` jobs, 0.5 ms without the index).
One fewer index also makes every enqueue cheaper.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP INDEX jobs_fetch_idx")


def downgrade() -> None:
    op.execute(
        "CREATE INDEX jobs_fetch_idx ON jobs (priority, available_at, id) WHERE status = 'pending'"
    )
