"""Job types from user code: concurrency classes become data, a job's role is stored.

* The CHECK that limited `jobs.concurrency_class` to ('ai', 'default') goes: classes and
  their slots are declared by the job-type registry and the settings, so a user's package
  can bring its own class without a migration.
* `jobs.role` (`job`, `parent`, `dispatch`) records how a job takes part in parent/child
  work (docs/explanation/state_machine.md, parents and children). Reconciling parents used
  to need the engine's list of parent and dispatch type names; with the role on the row the
  engine knows no type name and a user's parent types reconcile like the built-in
  `ccip.batch`. Existing CCIP rows are backfilled; `jobs_waiting_parents` lets the periodic
  reconciler find waiting parents without reading other jobs.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_concurrency_class_check")
    op.execute(
        "ALTER TABLE jobs ADD CONSTRAINT jobs_concurrency_class_not_empty"
        " CHECK (concurrency_class <> '')"
    )
    op.execute(
        "ALTER TABLE jobs ADD COLUMN role text NOT NULL DEFAULT 'job'"
        " CONSTRAINT jobs_role_check CHECK (role IN ('job', 'parent', 'dispatch'))"
    )
    op.execute("UPDATE jobs SET role = 'parent' WHERE type = 'ccip.batch'")
    op.execute("UPDATE jobs SET role = 'dispatch' WHERE type = 'ccip.dispatch'")
    op.execute(
        "CREATE INDEX jobs_waiting_parents ON jobs (id) WHERE role = 'parent' AND status = 'pending'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX jobs_waiting_parents")
    op.execute("ALTER TABLE jobs DROP COLUMN role")
    op.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_concurrency_class_not_empty")
    op.execute(
        "ALTER TABLE jobs ADD CONSTRAINT jobs_concurrency_class_check"
        " CHECK (concurrency_class IN ('ai', 'default')) NOT VALID"
    )
