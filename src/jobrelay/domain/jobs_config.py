"""Worker configuration values as text: slots and global caps per concurrency class,
failpoints and retention per job type. Pure parsing shared by the CLI (`--slots`) and the
settings (`JOBRELAY_WORKER_SLOTS`, `JOBRELAY_JOBS_GLOBAL_CAPS`, `JOBRELAY_JOBS_FAILPOINTS`,
`JOBRELAY_JOBS_RETENTION_BY_TYPE`); every error names the offending value. `QueueLimits`
is what a claim reads once they are resolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

# Concurrency classes are data: any name of this shape, declared by the job types that use
# it and given slots by the registry or the settings. A job type without a class is here.
DEFAULT_CLASS = "default"
CLASS_NAME_PATTERN = r"^[a-z][a-z0-9_.-]{0,62}$"
_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)

# Where a failure can be injected between the writes of parent/child work (tests, drills).
FAILPOINTS: frozenset[str] = frozenset(
    {
        "batch.after_parent",  # parent row written, its dispatch job not yet
        "batch.after_dispatch",  # parent and dispatch written, not committed
        "dispatch.before_children",  # dispatch completing, no child written yet
        "dispatch.after_children",  # children written, dispatch completion not committed
        "child.before_reconcile",  # a child's terminal write done, its parent not reconciled
    }
)


class ConfigError(ValueError):
    """A configuration value is malformed; the message names the value and what is wrong."""


def check_class_name(name: str) -> str:
    """`name` when it is a valid concurrency class name; raises `ConfigError` otherwise."""
    if not _CLASS_NAME.fullmatch(name):
        raise ConfigError(
            f"invalid concurrency class {name!r}: lowercase letters, digits, '_', '.', '-', "
            "starting with a letter, at most 63 characters"
        )
    return name


def key_values(text: str, *, what: str, expected: str, key: str) -> Iterator[tuple[str, str, str]]:
    """The `KEY=VALUE` parts of a comma-separated setting, as (part, key, value), stripped.

    Empty parts are skipped; a part without `=`, key or value, or a key given twice, raises
    `ConfigError` naming `what` and the part (`expected` shows the shape, e.g.
    `CLASS=N, e.g. ai=2`; `key` names what a key is in the duplicate message).
    """
    seen: set[str] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        name, sep, value = (p.strip() for p in part.partition("="))
        if not sep or not name or not value:
            raise ConfigError(f"invalid {what} {part!r}: expected {expected}")
        if name in seen:
            raise ConfigError(f"invalid {what} {text!r}: {key} {name!r} given twice")
        seen.add(name)
        yield part, name, value


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_TEXT = re.compile(r"^(\d+)([smhdw]?)$")
KEEP_FOREVER = "forever"


def parse_duration(value: str, *, what: str) -> int:
    """Whole seconds from `"30d"`, `"12h"`, `"90m"`, `"3600s"` or `"3600"`; raises
    `ConfigError` naming `what` when it is malformed, zero or negative."""
    found = _DURATION_TEXT.fullmatch(value.strip().lower())
    if found is None:
        raise ConfigError(
            f"invalid {what} {value!r}: expected a whole number with an optional unit "
            "s, m, h, d or w, e.g. 30d, 12h, 3600"
        )
    seconds = int(found.group(1)) * _DURATION_UNITS[found.group(2) or "s"]
    if seconds <= 0:
        raise ConfigError(f"invalid {what} {value!r}: must be > 0")
    return seconds


def parse_type_retention(text: str, *, what: str) -> dict[str, int | None]:
    """`"audit.record=365d,media.process=2d,code2wf.dispatch=forever"` -> seconds to keep
    finished jobs of each type (None: forever). Raises `ConfigError` naming `what` and the
    bad part."""
    kept: dict[str, int | None] = {}
    for _part, name, value in key_values(
        text, what=what, expected="TYPE=DURATION, e.g. audit.record=365d", key="job type"
    ):
        kept[name] = (
            None
            if value.lower() == KEEP_FOREVER
            else parse_duration(value, what=f"{what} retention of {name!r}")
        )
    return kept


def parse_class_counts(text: str, *, what: str, minimum: int = 0) -> dict[str, int]:
    """`"ai=2,default=8"` -> `{"ai": 2, "default": 8}`.

    Each class at most once, a valid class name, an integer >= `minimum`. An empty text is an
    empty mapping. Raises `ConfigError` naming `what` and the bad part.
    """
    counts: dict[str, int] = {}
    for part, name, value in key_values(
        text, what=what, expected="CLASS=N, e.g. ai=2,default=8", key="class"
    ):
        try:
            check_class_name(name)
        except ConfigError as exc:
            raise ConfigError(f"invalid {what} {part!r}: {exc}") from None
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"invalid {what} {part!r}: {value!r} is not an integer") from None
        if number < minimum:
            raise ConfigError(f"invalid {what} {part!r}: must be >= {minimum}")
        counts[name] = number
    return counts


def parse_failpoints(text: str) -> dict[str, int | None]:
    """`"dispatch.before_children=2,child.before_reconcile"` -> name -> times (None: always)."""
    armed: dict[str, int | None] = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if name not in FAILPOINTS:
            raise ConfigError(
                f"invalid failpoint {part!r}: unknown name {name!r} "
                f"(known: {', '.join(sorted(FAILPOINTS))})"
            )
        times: int | None = None
        if sep:
            try:
                times = int(value)
            except ValueError:
                raise ConfigError(
                    f"invalid failpoint {part!r}: {value.strip()!r} is not an integer"
                ) from None
            if times < 1:
                raise ConfigError(f"invalid failpoint {part!r}: times must be >= 1")
        armed[name] = times
    return armed


def format_class_counts(counts: Mapping[str, int]) -> str:
    return ",".join(f"{name}={counts[name]}" for name in sorted(counts))


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `max_starts` claims (job starts) in any `period_s` seconds."""

    max_starts: int
    period_s: float

    def __str__(self) -> str:
        return f"{self.max_starts}/{self.period_s:g}s"


_RATE_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0}
_RATE_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


def parse_rate(value: object, *, what: str) -> Rate:
    """A rate from `"60/min"`, `"30/10s"`, `"5/s"`, `"1000/h"`, a pair `(30, 10)` (30 per
    10 seconds) or a `Rate`. Raises `ConfigError` naming `what` when it is malformed, zero
    or negative."""
    if isinstance(value, Rate):
        count, period = value.max_starts, value.period_s
    elif isinstance(value, str):
        found = _RATE_TEXT.fullmatch(value.lower())
        unit = _RATE_UNITS.get(found.group(3)) if found else None
        if found is None or unit is None:
            raise ConfigError(
                f"invalid {what} {value!r}: expected N/UNIT or N/SECONDSs, "
                "e.g. 60/min, 30/10s, 5/s, 1000/h"
            )
        count = int(found.group(1))
        period = float(found.group(2) or 1) * unit
    elif (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        count, period = value
        if count != int(count):
            raise ConfigError(f"invalid {what} {value!r}: the number of starts must be whole")
        count = int(count)
    else:
        raise ConfigError(
            f"invalid {what} {value!r}: expected a text like '60/min' or a pair (starts, seconds)"
        )
    if count < 1 or not period > 0 or period != period or period == float("inf"):
        raise ConfigError(f"invalid {what} {value!r}: starts and period must be > 0")
    return Rate(int(count), float(period))


def parse_class_rates(text: str, *, what: str) -> dict[str, Rate]:
    """`"ai=60/min,default=30/10s"` -> rates per class. Raises `ConfigError` naming `what`
    and the bad part."""
    rates: dict[str, Rate] = {}
    for part, name, value in key_values(
        text, what=what, expected="CLASS=RATE, e.g. ai=60/min", key="class"
    ):
        try:
            check_class_name(name)
        except ConfigError as exc:
            raise ConfigError(f"invalid {what} {part!r}: {exc}") from None
        rates[name] = parse_rate(value, what=f"{what} rate of {name!r}")
    return rates


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """Everything a claimer's claims obey that is fixed for its life, resolved once from its
    slots, the global caps and the rates of the registry and the settings (a worker builds
    it at its start); `jobs.claims.claim` reads this one value. Invalid values raise
    `ValueError` naming them.

    `lease_s`: the lease a claim sets.
    `total`: jobs at once over all classes.
    `slots`: jobs at once per concurrency class (a class without slots is not claimed);
    None: every class with pending jobs, each up to `total` (a one-off claim).
    `caps`: global caps per class, across every claimer (invariant 10).
    `rates`: starts per period per class (`job_rate_windows`).
    `fair`: rotate claims across fairness keys (False: strict priority and arrival order).
    `types`: the job types the claimer has handlers for (None: every type); jobs of other
    types are left pending for a claimer that has one.
    """

    lease_s: float
    total: int
    slots: Mapping[str, int] | None = None
    caps: Mapping[str, int] = field(default_factory=dict)
    rates: Mapping[str, Rate] = field(default_factory=dict)
    fair: bool = True
    types: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not self.lease_s > 0:
            raise ValueError(f"lease_s must be > 0, got {self.lease_s}")
        if self.total < 0:
            raise ValueError(f"total must be >= 0, got {self.total}")
        if self.slots is not None:
            if any(n < 0 for n in self.slots.values()):
                raise ValueError(f"slots must be >= 0, got {dict(self.slots)}")
            object.__setattr__(self, "slots", dict(self.slots))
        if any(cap < 1 for cap in self.caps.values()):
            raise ValueError(f"caps must be >= 1, got {dict(self.caps)}")
        object.__setattr__(self, "caps", dict(self.caps))
        object.__setattr__(self, "rates", dict(self.rates))
