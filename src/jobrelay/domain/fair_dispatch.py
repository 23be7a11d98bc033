"""Fair dispatch of the batch outbox between organizations: the relay's settings (pure).

See `jobrelay.batches.relay` and docs/explanation/fair_dispatch.md.
"""

from __future__ import annotations

import math

from jobrelay.domain.jobs_config import ConfigError, key_values


def parse_organization_weights(text: str, *, what: str) -> tuple[tuple[int, float], ...]:
    """`"42=2,7=0.5"` -> `((7, 0.5), (42, 2.0))`: the relay's weight per organization id.

    Each organization at most once, an integer id, a positive finite number. An empty text
    is no weights (every organization weighs 1). Raises `ConfigError` (a `ValueError`)
    naming `what` and the bad part.
    """
    weights: dict[int, float] = {}
    for part, org, value in key_values(
        text, what=what, expected="ORGANIZATION_ID=WEIGHT, e.g. 42=2", key="organization"
    ):
        try:
            organization_id = int(org)
        except ValueError:
            raise ConfigError(
                f"invalid {what} {part!r}: {org!r} is not an organization id"
            ) from None
        try:
            weight = float(value)
        except ValueError:
            raise ConfigError(f"invalid {what} {part!r}: {value!r} is not a number") from None
        if not (weight > 0 and math.isfinite(weight)):
            raise ConfigError(f"invalid {what} {part!r}: the weight must be a positive number")
        if organization_id in weights:  # "42" and "042" are one organization
            raise ConfigError(
                f"invalid {what} {text!r}: organization {organization_id} given twice"
            )
        weights[organization_id] = weight
    return tuple(sorted(weights.items()))
