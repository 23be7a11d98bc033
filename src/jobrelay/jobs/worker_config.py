"""How a jobs worker runs (`WorkerConfig`) and what it counted (`WorkerStats`).

`jobrelay.jobs.worker` re-exports both; the producer, executor and completer read the
config and add to the same stats.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobrelay.domain.jobs_config import DEFAULT_CLASS, ConfigError, Rate, check_class_name
from jobrelay.jobs.ticker import DEFAULT_GRACE_S
from jobrelay.jobs.workflows.graph import DEFAULT_MAX_STEPS

_DEFAULT_CONCURRENCY = 10


def default_worker_id() -> str:
    """`host:pid:random`: unique per process, readable in `worker_heartbeat` and logs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one worker process runs jobs. Invalid values raise `ValueError` naming them.

    `slots`: jobs run at once per concurrency class; a class without slots is not claimed.
    Without `slots`, every class of `known_classes` shares `concurrency` slots.
    `concurrency`: the total over all classes (default: the sum of `slots`, else 10).
    `global_caps`: at most that many running jobs of a class across ALL workers (every
    worker must use the same caps).
    `prefetch`: jobs claimed ahead of free slots (held, heartbeated, started as slots free).
    `schedule_grace_s`: a schedule's tick due for longer than this when a ticker reaches it
    was missed (its catch-up policy applies); a younger one gets its own job.
    `retention_s`: finished jobs are kept this long (None: forever); `retention_by_type`
    overrides it per job type (`jobs.retention`; every worker should use the same).
    `prune_log_threshold`: a prune pass deleting more rows than this logs a warning.
    `workflow_retention_s`: an ended workflow is kept this long after its last step ended,
    then pruned with its steps and results (None: forever); `workflow_max_steps` bounds a
    workflow's steps, those a running step adds included.
    `listen_conninfo`: the session connection the listener uses (default: the pool's); a
    transaction pooler cannot LISTEN, so it takes a direct one.
    `claim_session_settings`: False when the pool goes through a transaction pooler, where
    session settings would leak to other clients' server connections (claims then commit
    synchronously, like every other write).
    `rates`: rate limits per class on top of those the registry declares (every worker must
    use the same). `fair_claims`: rotate claims across fairness keys (False: strict priority
    and arrival order, the claim before issue 17).
    `claim_floors`: claims start reading the pending indexes at a per-class floor the claim
    loop refreshes (`jobs.floors`), so entries of jobs claimed since an old snapshot pinned
    the horizon are not visited (False: from the start, the claim before issue 27).
    `hold_slot_until_recorded`: a bounded flush window. When the completions not yet
    recorded (buffered or being committed) exceed 4 per slot of the worker, a finished job
    keeps its slot until the flush has recorded its completion (at most one lease), so a
    killed worker loses at most 5 x slots finished-but-unrecorded completions, whose
    handlers then run again elsewhere; while the flush keeps up nothing waits. False never
    waits: completions then pile up in the flush without bound while the database is slow
    (bench/chaos measures both).
    """

    concurrency: int | None = None
    slots: Mapping[str, int] | None = None
    known_classes: Sequence[str] = (DEFAULT_CLASS,)
    global_caps: Mapping[str, int] = field(default_factory=dict)
    lease_s: float = 30.0
    poll_interval_s: float = 0.25
    rescue_interval_s: float = 5.0
    reconcile_interval_s: float = 10.0
    unserved_fail_after_s: float = 3600.0
    prune_interval_s: float = 300.0
    retention_s: float | None = 7 * 24 * 3600.0
    retention_by_type: Mapping[str, float | None] = field(default_factory=dict)
    prune_log_threshold: int = 1000
    workflow_retention_s: float | None = 7 * 24 * 3600.0
    workflow_max_steps: int = DEFAULT_MAX_STEPS
    shutdown_grace_s: float = 10.0
    prefetch: int = 0
    listen: bool = True
    listen_conninfo: str | None = None
    claim_session_settings: bool = True
    rates: Mapping[str, Rate] = field(default_factory=dict)
    fair_claims: bool = True
    claim_floors: bool = True
    hold_slot_until_recorded: bool = True
    lock_timeout_s: float = 0.3
    result_limit_bytes: int = 1024 * 1024
    metrics_port: int | None = None
    worker_id: str = field(default_factory=default_worker_id)
    schedule_grace_s: float = DEFAULT_GRACE_S
    shared: bool = field(init=False, default=False)  # built from `concurrency` alone

    def __post_init__(self) -> None:
        object.__setattr__(self, "shared", self.slots is None)
        slots = dict(self.slots) if self.slots is not None else None
        for name, count in (slots or {}).items():
            _check_class("slots", name)
            if count < 0:
                raise ValueError(f"slots: {name}={count} must be >= 0")
        if slots is not None and not any(slots.values()):
            raise ValueError(f"slots: at least one class needs a slot, got {slots}")
        concurrency = self.concurrency
        if concurrency is None:
            concurrency = sum(slots.values()) if slots else _DEFAULT_CONCURRENCY
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if slots is None:
            slots = dict.fromkeys(self.known_classes, concurrency)
        object.__setattr__(self, "concurrency", concurrency)
        object.__setattr__(self, "slots", {c: n for c, n in slots.items() if n > 0})
        for name, cap in self.global_caps.items():
            _check_class("global_caps", name)
            if cap < 1:
                raise ValueError(f"global_caps: {name}={cap} must be >= 1")
        object.__setattr__(self, "global_caps", dict(self.global_caps))
        for name in (
            "lease_s",
            "poll_interval_s",
            "rescue_interval_s",
            "reconcile_interval_s",
            "unserved_fail_after_s",
            "prune_interval_s",
            "lock_timeout_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.unserved_fail_after_s < self.lease_s:
            raise ValueError(
                f"unserved_fail_after_s must be >= lease_s ({self.lease_s}), got "
                f"{self.unserved_fail_after_s}: a live worker's heartbeat must come within it"
            )
        if self.retention_s is not None and not self.retention_s > 0:
            raise ValueError(f"retention_s must be > 0 or None, got {self.retention_s}")
        for name, kept in self.retention_by_type.items():
            if kept is not None and not kept > 0:
                raise ValueError(f"retention_by_type: {name}={kept!r} must be > 0 or None")
        object.__setattr__(self, "retention_by_type", dict(self.retention_by_type))
        if self.workflow_retention_s is not None and not self.workflow_retention_s > 0:
            raise ValueError(
                f"workflow_retention_s must be > 0 or None, got {self.workflow_retention_s}"
            )
        if self.workflow_max_steps < 1:
            raise ValueError(f"workflow_max_steps must be >= 1, got {self.workflow_max_steps}")
        if self.shutdown_grace_s < 0:
            raise ValueError(f"shutdown_grace_s must be >= 0, got {self.shutdown_grace_s}")
        if not self.schedule_grace_s > 0:
            raise ValueError(f"schedule_grace_s must be > 0, got {self.schedule_grace_s}")
        if self.result_limit_bytes < 1:
            raise ValueError(f"result_limit_bytes must be >= 1, got {self.result_limit_bytes}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in 0..65535, got {self.metrics_port}")

    @property
    def class_slots(self) -> dict[str, int]:
        assert self.slots is not None  # set by __post_init__
        return dict(self.slots)

    @property
    def total_slots(self) -> int:
        assert self.concurrency is not None  # set by __post_init__
        return self.concurrency

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(sorted(self.class_slots))

    @property
    def heartbeat_interval_s(self) -> float:
        return self.lease_s / 3


def _check_class(what: str, name: str) -> None:
    try:
        check_class_name(name)
    except ConfigError as exc:
        raise ValueError(f"{what}: {exc}") from None


@dataclass
class WorkerStats:
    """Counters for tests and logs; tests poll these (or the database), never sleep."""

    claims: int = 0  # claim statements run
    claimed: int = 0  # jobs they claimed
    completed: int = 0
    requeued: int = 0
    retried: int = 0
    failed: int = 0
    lease_lost: int = 0
    released: int = 0
    errors: int = 0
    claim_races: int = 0
    parents_ended: int = 0
    deferred: int = 0  # writes of rows another transaction locked, left for the next try
    split_out: int = 0  # rows a batched write found bad and failed alone
