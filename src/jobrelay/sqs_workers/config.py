"""What one `sqs-worker` process needs, taken from `Settings` (no database settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobrelay.settings import Settings


@dataclass(frozen=True)
class WorkerConfig:
    queue_name: str
    bucket: str
    webhook_url: str
    webhook_secret: str
    concurrency: int = 8
    visibility_timeout_s: int = 30
    heartbeat_s: float = 10.0
    poll_wait_s: int = 10
    handler_timeout_s: float = 120.0
    webhook_timeout_s: float = 10.0
    webhook_retry_s: float = 120.0
    webhook_backoff_base_s: float = 0.5
    webhook_backoff_cap_s: float = 10.0
    shutdown_grace_s: float = 20.0
    file_root: Path | None = None
    fetch_max_bytes: int = 5 * 1024 * 1024
    fetch_timeout_s: float = 10.0
    # Used only when the queue has no redrive policy to read maxReceiveCount from.
    max_receive_count: int = 5

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkerConfig:
        """The `sqs_worker` group, plus what the worker shares with the rest of the stack:
        the queue (`sqs`), the results bucket (`aws`) and the signing secret (`webhooks`:
        the first signs)."""
        worker = settings.sqs_worker
        return cls(
            queue_name=settings.sqs.queue_name,
            bucket=settings.aws.s3_bucket,
            webhook_url=worker.webhook_url,
            webhook_secret=settings.webhooks.secrets[0].get_secret_value(),
            concurrency=worker.concurrency,
            visibility_timeout_s=worker.visibility_timeout_s,
            heartbeat_s=worker.heartbeat_s,
            poll_wait_s=worker.poll_wait_s,
            handler_timeout_s=worker.handler_timeout_s,
            webhook_timeout_s=worker.webhook_timeout_s,
            webhook_retry_s=worker.webhook_retry_s,
            shutdown_grace_s=worker.shutdown_grace_s,
            file_root=worker.file_root,
            fetch_max_bytes=worker.fetch_max_bytes,
            max_receive_count=settings.sqs.max_receive_count,
        )
