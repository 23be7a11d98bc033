"""`worker_heartbeat`: the live jobs workers and the classes they serve.

Each jobs worker upserts its row (id, slots per class, global caps, timestamps) every
heartbeat interval (lease/3) and deletes it on a clean stop; a killed worker's row stops
being refreshed and goes stale. "Why isn't this job running?" (`jobrelay.jobs.diagnosis`)
reads it to tell whether any live worker serves a job's concurrency class. `heartbeat_at`
is database time (`clock_timestamp()`). Rows not refreshed for a day are deleted by the
workers themselves.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE worker_heartbeat (
            worker_id text PRIMARY KEY CHECK (worker_id <> ''),
            classes text[] NOT NULL,
            class_slots jsonb NOT NULL DEFAULT '{}'::jsonb,
            global_caps jsonb NOT NULL DEFAULT '{}'::jsonb,
            interval_s double precision NOT NULL CHECK (interval_s > 0),
            started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE worker_heartbeat")
