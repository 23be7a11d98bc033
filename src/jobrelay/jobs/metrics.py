"""Prometheus metrics of one worker process, served on `/metrics` when a port is set.

Each `WorkerMetrics` has its own registry (several workers in one test process never
collide); `serve(port)` starts prometheus_client's HTTP server thread for it.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger("jobrelay.jobs.metrics")
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.claimed = Counter(
            "jobrelay_jobs_claimed", "Jobs claimed by this worker", ["type"], registry=r
        )
        self.completed = Counter(
            "jobrelay_jobs_completed", "Jobs completed by this worker", ["type"], registry=r
        )
        self.failed = Counter(
            "jobrelay_jobs_failed",
            "Jobs that ended failed (permanent or out of attempts)",
            ["type"],
            registry=r,
        )
        self.retried = Counter(
            "jobrelay_jobs_retried", "Failed attempts put back for a retry", ["type"], registry=r
        )
        self.running = Gauge(
            "jobrelay_jobs_running", "Jobs running now, by class", ["class"], registry=r
        )
        self.lease_lost = Counter(
            "jobrelay_jobs_lease_lost", "Claims found lost (expired, cancelled)", registry=r
        )
        self.released = Counter("jobrelay_jobs_released", "Jobs given back at shutdown", registry=r)
        self.rows_deferred = Counter(
            "jobrelay_jobs_rows_deferred",
            "Writes of job rows another transaction locked, left for the next try",
            ["write"],
            registry=r,
        )
        self.rows_refused = Counter(
            "jobrelay_jobs_rows_refused",
            "Job results that could not be stored, failing only their job (found: "
            "checked before the write, or split out of a batched write PostgreSQL refused)",
            ["found"],
            registry=r,
        )
        self.claim_latency = Histogram(
            "jobrelay_claim_latency_seconds",
            "Duration of one claim cycle (record completions + claim + commit)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.handler_duration = Histogram(
            "jobrelay_handler_duration_seconds",
            "Handler run time, by type",
            ["type"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self._server: Any = None

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve `/metrics` on `port` (0: a free one); returns the port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        bound = int(server.server_address[1])
        log.info("metrics on http://%s:%d/metrics", addr, bound)
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
