"""Failpoints: injected failures between the writes of parent, dispatch and child creation.

Armed by the setting `JOBRELAY_JOBS_FAILPOINTS` (e.g. `dispatch.before_children=2`: the
first two hits fail) or by a test passing its own `Failpoints`. A hit raises
`InjectedFailure` inside the transaction doing the writes, so the transaction rolls back;
the tests then check that no non-terminal parent is left without live work. Unarmed
failpoints cost one dictionary lookup.
"""

from __future__ import annotations

from collections.abc import Mapping

from jobrelay.domain.jobs_config import FAILPOINTS, ConfigError, parse_failpoints


class InjectedFailure(RuntimeError):
    """Raised at an armed failpoint. A plain RuntimeError: the worker classifies it as an
    unexpected, retryable error."""


class Failpoints:
    """Named failpoints, each unarmed, armed for N hits, or armed for every hit."""

    def __init__(self, armed: Mapping[str, int | None] | None = None) -> None:
        self._armed: dict[str, int | None] = {}
        for name, times in (armed or {}).items():
            if name not in FAILPOINTS:
                raise ConfigError(f"unknown failpoint {name!r}")
            self._armed[name] = times
        self.hits: dict[str, int] = {}

    @classmethod
    def parse(cls, text: str) -> Failpoints:
        return cls(parse_failpoints(text))

    def hit(self, name: str) -> None:
        """Raise `InjectedFailure` when `name` is armed (and has hits left)."""
        if not self._armed or name not in self._armed:
            return
        self.hits[name] = self.hits.get(name, 0) + 1
        times = self._armed[name]
        if times is not None:
            if times <= 0:
                return
            self._armed[name] = times - 1
        raise InjectedFailure(f"injected failure at failpoint {name}")


NO_FAILPOINTS = Failpoints()
