"""`jobs_unsuccessful_idx`: the jobs list filtered by a failed or cancelled status without
reading the whole history, on every supported PostgreSQL.

The console and `GET /v1/jobs?status=failed` read `jobs_type_status_idx (type, status, id)`
for a status alone through PostgreSQL 18's skip scan; PostgreSQL 15 has no skip scan, so a
rare status (no cancelled job at all, say) made it read every row and sort them. A partial
index of the unsuccessful jobs only: its rows are written when a job fails or is cancelled
(an update that changes the status anyway), never at enqueue, claim or completion.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX jobs_unsuccessful_idx ON jobs (status, id) "
        "WHERE status IN ('failed', 'cancelled')"
    )


def downgrade() -> None:
    op.execute("DROP INDEX jobs_unsuccessful_idx")
