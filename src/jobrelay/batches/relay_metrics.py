"""The relay's Prometheus metrics (`RelayMetrics`), apart from the pump that counts them.

It sits beside `jobrelay.batches.relay` as `jobrelay.jobs.metrics` sits beside the jobs
worker: the CLI serves the registry (`bootstrap.runners`) and tests read it without a relay.
Each instance has its own registry, so several relays in one test process never collide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class RelayMetrics:
    """Prometheus metrics of one relay process (its own registry, served by the CLI)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.claimed = Counter(
            "jobrelay_relay_claimed", "Items claimed (dispatch attempts started)", registry=r
        )
        self.sent = Counter("jobrelay_relay_items_sent", "Items accepted by SQS", registry=r)
        self.failed_attempts = Counter(
            "jobrelay_relay_failed_attempts", "Dispatch attempts that failed", registry=r
        )
        self.terminal_failures = Counter(
            "jobrelay_relay_terminal_failures",
            "Items failed for good (third failed attempt or expired last claim)",
            ["reason"],
            registry=r,
        )
        self.lost_claims = Counter(
            "jobrelay_relay_lost_claims",
            "Sends whose claim was taken over before they were recorded",
            registry=r,
        )
        self.count_drift = Counter(
            "jobrelay_batch_count_drift",
            "Batches whose kept counts differed from the recount (then repaired)",
            registry=r,
        )
        self.given_back = Counter(
            "jobrelay_relay_given_back",
            "Claimed items given back uncounted because the queue was unreachable",
            registry=r,
        )
        self.rows_deferred = Counter(
            "jobrelay_relay_rows_deferred",
            "Row writes left for a later round because another transaction held a lock they "
            "need (counted each round they wait)",
            ["write"],
            registry=r,
        )
        self.rows_unstorable = Counter(
            "jobrelay_relay_rows_unstorable",
            "Final failures whose reason PostgreSQL refused (split out of their batch and "
            "failed with a reason saying so)",
            registry=r,
        )
        self.circuit_open = Gauge(
            "jobrelay_relay_circuit_open",
            "1 while the relay's circuit on the queue endpoint is open",
            registry=r,
        )
        self.claim_to_send = Histogram(
            "jobrelay_relay_claim_to_send_seconds",
            "Time from the claim's commit to SQS accepting the item",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
