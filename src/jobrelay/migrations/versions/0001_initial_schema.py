"""The whole schema: tenancy, batch outbox, child jobs, Code2WF, jobs engine, ops.

`batch_item` follows seed 000 and `code2wf` seed 004 column by column. `updated_at` is kept
by one trigger function on every table that has the column, so no statement can forget it.
`jobs` is LOGGED from the start; `jobrelay ops set-logged` serves legacy databases only.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION jobrelay_touch_updated_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := CURRENT_TIMESTAMP;
    RETURN NEW;
END
$$;

CREATE TYPE wf2des_status AS ENUM ('0', '1', '2', '3', '4');

-- Tenancy -------------------------------------------------------------------------------

CREATE TABLE organization (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        varchar(255) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    deleted_at  timestamptz,
    created_by  varchar(50) NOT NULL,
    updated_by  varchar(50) NOT NULL,
    deleted_by  varchar(50)
);

CREATE TABLE project (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id  bigint NOT NULL REFERENCES organization (id),
    name             varchar(255) NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    deleted_at       timestamptz,
    created_by       varchar(50) NOT NULL,
    updated_by       varchar(50) NOT NULL,
    deleted_by       varchar(50)
);
CREATE INDEX project_organization_id_idx ON project (organization_id);

CREATE TABLE organization_member (
    organization_id  bigint NOT NULL REFERENCES organization (id) ON DELETE CASCADE,
    subject          varchar(50) NOT NULL,
    role             varchar(20) NOT NULL DEFAULT 'member' CHECK (role IN ('member', 'admin')),
    created_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    created_by       varchar(50) NOT NULL,
    updated_by       varchar(50) NOT NULL,
    PRIMARY KEY (organization_id, subject)
);
CREATE INDEX organization_member_subject_idx ON organization_member (subject);

-- Batch outbox (seed 000) ---------------------------------------------------------------

CREATE TABLE batch (
    id               varchar(255) PRIMARY KEY,
    organization_id  bigint NOT NULL REFERENCES organization (id),
    project_id       bigint NOT NULL REFERENCES project (id),
    type             varchar(20) NOT NULL CHECK (type IN ('page_import', 'code2des')),
    cancelled_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    deleted_at       timestamptz,
    created_by       varchar(50) NOT NULL,
    updated_by       varchar(50) NOT NULL,
    deleted_by       varchar(50)
);
CREATE INDEX batch_project_id_deleted_at_idx ON batch (project_id, deleted_at);

CREATE TABLE batch_item (
    id                 varchar(255) PRIMARY KEY,
    batch_id           varchar(255) NOT NULL REFERENCES batch (id) ON DELETE CASCADE,
    position           integer NOT NULL,
    request            jsonb NOT NULL,
    job_id             varchar(255),
    message            jsonb,
    dispatched_at      timestamptz,
    lease_until        timestamptz,
    dispatch_attempts  integer NOT NULL DEFAULT 0,
    error_message      text,
    cancelled_at       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at         timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    deleted_at         timestamptz,
    created_by         varchar(50) NOT NULL,
    updated_by         varchar(50) NOT NULL,
    deleted_by         varchar(50)
);
CREATE INDEX batch_item_batch_idx ON batch_item (batch_id, position);
CREATE INDEX batch_item_dispatch_idx ON batch_item (dispatched_at, lease_until);

-- Child jobs completed by worker webhooks (seeds 000, 004) -------------------------------

CREATE TABLE page_import (
    id               varchar(255) PRIMARY KEY,
    organization_id  bigint NOT NULL REFERENCES organization (id),
    project_id       bigint NOT NULL REFERENCES project (id),
    batch_id         varchar(255) REFERENCES batch (id) ON DELETE SET NULL,
    request          jsonb NOT NULL,
    status           wf2des_status NOT NULL DEFAULT '0',
    result_url       varchar(500),
    manifest_hash    varchar(128),
    error_message    text,
    created_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    deleted_at       timestamptz,
    created_by       varchar(50) NOT NULL,
    updated_by       varchar(50) NOT NULL,
    deleted_by       varchar(50)
);
CREATE INDEX page_import_project_id_deleted_at_idx ON page_import (project_id, deleted_at);
CREATE INDEX page_import_batch_id_idx ON page_import (batch_id);

CREATE TABLE code2des (
    id               varchar(255) PRIMARY KEY,
    organization_id  bigint NOT NULL REFERENCES organization (id),
    project_id       bigint NOT NULL REFERENCES project (id),
    batch_id         varchar(255) REFERENCES batch (id) ON DELETE SET NULL,
    request          jsonb NOT NULL,
    status           wf2des_status NOT NULL DEFAULT '0',
    result_url       varchar(500),
    error_message    text,
    created_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    deleted_at       timestamptz,
    created_by       varchar(50) NOT NULL,
    updated_by       varchar(50) NOT NULL,
    deleted_by       varchar(50)
);
CREATE INDEX code2des_project_id_deleted_at_idx ON code2des (project_id, deleted_at);
CREATE INDEX code2des_batch_id_idx ON code2des (batch_id);

CREATE TABLE code2wf (
    id                varchar(255) PRIMARY KEY,
    organization_id   bigint NOT NULL REFERENCES organization (id),
    project_id        bigint NOT NULL REFERENCES project (id),
    page_import_id    varchar(255) NOT NULL REFERENCES page_import (id),
    figma_file_key    varchar(255) NOT NULL,
    screen_id         varchar(255) NOT NULL,
    placement_target  varchar(255),
    status            wf2des_status NOT NULL DEFAULT '0',
    attempt           integer NOT NULL DEFAULT 1,
    flag_count        integer,
    result_url        varchar(500),
    error_message     text,
    materialized_at   timestamptz,
    created_at        timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at        timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    deleted_at        timestamptz,
    created_by        varchar(50) NOT NULL,
    updated_by        varchar(50) NOT NULL,
    deleted_by        varchar(50)
);
CREATE INDEX code2wf_project_id_deleted_at_idx ON code2wf (project_id, deleted_at);
CREATE INDEX code2wf_project_status_idx ON code2wf (project_id, status);
CREATE INDEX code2wf_org_project_file_status_idx
    ON code2wf (organization_id, project_id, figma_file_key, status);
CREATE INDEX code2wf_page_import_id_idx ON code2wf (page_import_id);

-- A repeated Standard Webhooks `webhook-id` is acknowledged without reprocessing.
CREATE TABLE webhook_delivery (
    webhook_id   varchar(255) PRIMARY KEY,
    body_sha256  char(64) NOT NULL,
    status_code  integer NOT NULL,
    response     jsonb NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- Jobs engine (seed 003) ----------------------------------------------------------------

CREATE TABLE jobs (
    id                 uuid PRIMARY KEY,
    type               text NOT NULL,
    payload            jsonb NOT NULL DEFAULT '{}'::jsonb,
    status             text NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'cancelled')),
    dedupe_key         text,
    revision           bigint NOT NULL DEFAULT 1,
    parent_id          uuid REFERENCES jobs (id) ON DELETE CASCADE,
    source_key         text,
    concurrency_class  text NOT NULL DEFAULT 'default' CHECK (concurrency_class IN ('ai', 'default')),
    class_slot         integer,
    priority           smallint NOT NULL DEFAULT 0,
    attempt_count      integer NOT NULL DEFAULT 0,
    max_attempts       integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    available_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    claim_token        uuid,
    claimed_by         text,
    claimed_at         timestamptz,
    lease_expires_at   timestamptz,
    heartbeat_at       timestamptz,
    failure_kind       text CHECK (failure_kind IN ('retryable', 'permanent', 'lease_expired', 'cancelled')),
    last_error         text,
    result             jsonb,
    created_at         timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at         timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    finished_at        timestamptz,
    -- A claim exists exactly while the job runs: no token on a pending or finished job.
    CONSTRAINT jobs_claim_matches_status
        CHECK ((status = 'in_progress') = (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
-- Invariant 1: one active job per (type, dedupe_key). Enqueue's ON CONFLICT repeats this predicate.
CREATE UNIQUE INDEX jobs_active_dedupe_key
    ON jobs (type, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'in_progress');
-- Invariant 11: at most one running job per source, whatever the claim query does.
CREATE UNIQUE INDEX jobs_running_source_key
    ON jobs (source_key)
    WHERE source_key IS NOT NULL AND status = 'in_progress';
-- Invariant 10: a global cap per class is a fixed set of slots, each held by one running job.
CREATE UNIQUE INDEX jobs_running_class_slot
    ON jobs (concurrency_class, class_slot)
    WHERE class_slot IS NOT NULL AND status = 'in_progress';
CREATE INDEX jobs_fetch_idx ON jobs (priority, available_at, id) WHERE status = 'pending';
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE status = 'in_progress';
CREATE INDEX jobs_parent_id_idx ON jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX jobs_type_status_idx ON jobs (type, status, id);
CREATE INDEX jobs_finished_at_idx ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- Singleton control row: pause flags for quiesce (invariant 13).
CREATE TABLE jobs_control (
    id               boolean PRIMARY KEY DEFAULT true CHECK (id),
    claims_paused    boolean NOT NULL DEFAULT false,
    enqueue_paused   boolean NOT NULL DEFAULT false,
    reason           text,
    created_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at       timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_by       varchar(50) NOT NULL DEFAULT 'system'
);
INSERT INTO jobs_control (id) VALUES (true);

-- Fenced business outputs of the built-in job types.
CREATE TABLE media_processing_state (
    media_id    text PRIMARY KEY,
    revision    bigint NOT NULL,
    tags        jsonb NOT NULL,
    job_id      uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP
);

CREATE TABLE source_sync_state (
    source_id   text NOT NULL,
    sync_kind   text NOT NULL,
    revision    bigint NOT NULL,
    job_id      uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (source_id, sync_kind)
);

CREATE TABLE index_delta_applied (
    index_name    text NOT NULL,
    media_id      text NOT NULL,
    job_id        uuid NOT NULL,
    job_revision  bigint NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (index_name, media_id, job_id, job_revision)
);

-- Sources known to CCIP batches (`allSources` expands to the active ones).
CREATE TABLE ccip_source (
    id          text PRIMARY KEY,
    active      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at  timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- Ops runbook reports (quiesce, reconcile, set-logged).
CREATE TABLE ops_run (
    id           uuid PRIMARY KEY,
    kind         text NOT NULL,
    ok           boolean NOT NULL,
    report       jsonb NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    created_by   varchar(50) NOT NULL
);

DO $$
DECLARE t text;
BEGIN
    FOR t IN
        SELECT c.table_name FROM information_schema.columns c
        JOIN information_schema.tables tb
          ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name
        WHERE c.table_schema = current_schema() AND c.column_name = 'updated_at'
          AND tb.table_type = 'BASE TABLE'
    LOOP
        EXECUTE format(
            'CREATE TRIGGER %I BEFORE UPDATE ON %I '
            'FOR EACH ROW EXECUTE FUNCTION jobrelay_touch_updated_at()',
            t || '_touch_updated_at', t);
    END LOOP;
END
$$;
"""

DOWNGRADE = r"""
DROP TABLE ops_run, ccip_source, index_delta_applied, source_sync_state,
    media_processing_state, jobs_control, jobs, webhook_delivery, code2wf, code2des,
    page_import, batch_item, batch, organization_member, project, organization;
DROP TYPE wf2des_status;
DROP FUNCTION jobrelay_touch_updated_at();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
