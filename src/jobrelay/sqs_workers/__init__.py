"""Reference external workers: read SQS, do the work, write S3, call the signed webhook.

They never touch PostgreSQL (an import-linter contract keeps `db`, `jobs`, `batches`,
`generations`, `ops` and psycopg out). `serve()` runs one worker process; `jobrelay
sqs-worker` calls it through `bootstrap`. Rules for deleting, releasing and leaving
messages are in `runtime` and docs/explanation/sqs_workers.md.
"""

from jobrelay.sqs_workers.config import WorkerConfig
from jobrelay.sqs_workers.runtime import SqsWorker, WorkerStartupError, serve

__all__ = ["SqsWorker", "WorkerConfig", "WorkerStartupError", "serve"]
