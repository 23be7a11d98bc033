"""How a relay runs (`RelayConfig`), apart from the pump that reads it.

The CLI builds it from `settings.relay` and `settings.sqs` (`from_settings`); tests and the
benchmarks build it by hand. It sits beside `jobrelay.batches.relay` as
`jobrelay.jobs.worker_config` sits beside the jobs worker: a knob is read and changed without
the relay's loops, and importing it does not pull in the pump.

The bounds of every value are stated once, on the settings (`RelaySettings`'s `Field(gt=...,
ge=..., le=...)`, the weights' parser, `SqsSettings.message_limit_bytes`): unlike the jobs
engine, which never imports settings and so checks its own config, the relay's only way in
from the outside is `from_settings`, and a config written by hand is the code's own. No value
here depends on another, so there is nothing left for the config to check itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobrelay.batches.outbox import ClaimLimits
from jobrelay.settings import RelaySettings, SqsSettings


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """How one relay process claims, sends and records (`jobrelay.batches.relay.Relay`).

    `workers`: send loops (claim, send, record) per process, `JOBRELAY_RELAY_WORKERS`.
    `window`, `weights`: items one organization may have in flight, times its weight
    (`JOBRELAY_RELAY_ORG_WINDOW`, `JOBRELAY_RELAY_ORG_WEIGHTS`).
    `probe_timeout_s`, `verify_interval_s`, `verify_sample`: no settings; their defaults run
    in production.
    """

    lease_s: float = 90.0
    claim_size: int = 100
    workers: int = 4
    max_in_flight: int = 16
    poll_interval_s: float = 1.0
    retry_delay_s: float = 2.0
    message_limit_bytes: int = 256 * 1024
    send_timeout_s: float = 10.0
    probe_timeout_s: float = 1.0
    window: int = 200
    weights: tuple[tuple[int, float], ...] = ()
    in_flight_expiry_s: float = 900.0
    window_poll_s: float = 0.05
    verify_interval_s: float = 60.0
    verify_sample: int = 5
    lock_timeout_s: float = 0.3

    @property
    def claim_limits(self) -> ClaimLimits:
        """What each claim of this relay may take."""
        return ClaimLimits(
            limit=self.claim_size,
            lease_s=self.lease_s,
            window=self.window,
            weights=self.weights,
            in_flight_expiry_s=self.in_flight_expiry_s,
        )

    @classmethod
    def from_settings(cls, relay: RelaySettings, sqs: SqsSettings) -> RelayConfig:
        """The relay's configuration from its settings group and the queue's message limit."""
        return cls(
            lease_s=relay.lease_s,
            send_timeout_s=relay.send_timeout_s,
            claim_size=relay.claim_size,
            workers=relay.workers,
            max_in_flight=relay.max_in_flight,
            poll_interval_s=relay.poll_interval_s,
            retry_delay_s=relay.retry_delay_s,
            message_limit_bytes=sqs.message_limit_bytes,
            window=relay.org_window,
            weights=relay.organization_weights(),
            in_flight_expiry_s=relay.in_flight_expiry_s,
            window_poll_s=relay.window_poll_s,
            lock_timeout_s=relay.lock_timeout_s,
        )
