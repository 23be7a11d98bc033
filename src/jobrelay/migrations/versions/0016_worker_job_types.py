"""`worker_heartbeat.job_types`: the job types each live worker has handlers for.

A worker claims only the types it has handlers for (issue 24: during a rolling deploy that
adds a type, old workers leave its jobs pending instead of failing them as unknown). Its
heartbeat row records them, so "why isn't this job running?" can say "no live worker
serves type X" and the console and `/metrics` can count such jobs.

Expand only: a nullable column. A worker of the previous release writes no types (NULL),
read as "every type", which is what it claims.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE worker_heartbeat ADD COLUMN job_types text[] NULL")


def downgrade() -> None:
    op.execute("ALTER TABLE worker_heartbeat DROP COLUMN job_types")
