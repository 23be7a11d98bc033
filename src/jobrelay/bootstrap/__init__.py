"""Composition root: settings -> database -> pool -> clients -> services.

The only package that wires adapters together. The API and the CLI receive a `Services`
object from here and never construct a pool or a client themselves. One module per step:

* `errors`: `StartupError`, the one-line failure of any step;
* `environment`: what `JOBRELAY_ENV=production` refuses before anything starts;
* `database`: `DATABASE_URL` or the embedded server, migrated;
* `local_stack`: the SQS/S3 endpoint, or the local emulator;
* `job_types`: the deployment's job types and the worker configuration built from them;
* `services`: the pool, clients and services of one process;
* `runners`: long-running processes (relay, reference SQS worker) wired from settings;
* `tracing`: OpenTelemetry for one process, when the `OTEL_*` variables configure it.
"""

from jobrelay.aws.emulator import EmulatorError
from jobrelay.bootstrap.database import (
    database,
    embedded_pg_ctl,
    keep_embedded_running,
    migrate_database,
    require_own_data_dir,
)
from jobrelay.bootstrap.environment import ProcessKind, require_safe_environment
from jobrelay.bootstrap.errors import StartupError
from jobrelay.bootstrap.job_types import (
    deployment_job_types,
    jobs_registry,
    jobs_service,
    parse_slots,
    product_job_types,
    worker_config,
    worker_pool_size,
)
from jobrelay.bootstrap.local_stack import (
    aws_endpoint,
    aws_reachable,
    local_emulator,
    prepare_aws,
    require_free_port,
)
from jobrelay.bootstrap.runners import relay_pool_size, run_relay, run_sqs_worker
from jobrelay.bootstrap.services import Services, build_services, local_issuer
from jobrelay.bootstrap.tracing import start_tracing
from jobrelay.db.embedded import EmbeddedPostgresError
from jobrelay.db.errors import DatabaseUnavailable
from jobrelay.db.inspect import DatabaseReport, database_report
from jobrelay.jobs.worker import WorkerConfig

__all__ = [
    "DatabaseReport",
    "DatabaseUnavailable",
    "EmbeddedPostgresError",
    "EmulatorError",
    "ProcessKind",
    "Services",
    "StartupError",
    "WorkerConfig",
    "aws_endpoint",
    "aws_reachable",
    "build_services",
    "database",
    "database_report",
    "deployment_job_types",
    "embedded_pg_ctl",
    "jobs_registry",
    "jobs_service",
    "keep_embedded_running",
    "local_emulator",
    "local_issuer",
    "migrate_database",
    "parse_slots",
    "prepare_aws",
    "product_job_types",
    "relay_pool_size",
    "require_free_port",
    "require_own_data_dir",
    "require_safe_environment",
    "run_relay",
    "run_sqs_worker",
    "start_tracing",
    "worker_config",
    "worker_pool_size",
]
