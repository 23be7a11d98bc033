"""Worker configuration values as text: slots and global caps per concurrency class, and
failpoints. Pure parsing shared by the CLI (`--slots`) and the settings
(`JOBRELAY_WORKER_SLOTS`, `JOBRELAY_JOBS_GLOBAL_CAPS`, `JOBRELAY_JOBS_FAILPOINTS`); every
error names the offending value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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


def parse_class_counts(text: str, *, what: str, minimum: int = 0) -> dict[str, int]:
    """`"ai=2,default=8"` -> `{"ai": 2, "default": 8}`.

    Each class at most once, a valid class name, an integer >= `minimum`. An empty text is an
    empty mapping. Raises `ConfigError` naming `what` and the bad part.
    """
    counts: dict[str, int] = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ConfigError(f"invalid {what} {part!r}: expected CLASS=N, e.g. ai=2,default=8")
        try:
            check_class_name(name)
        except ConfigError as exc:
            raise ConfigError(f"invalid {what} {part!r}: {exc}") from None
        if name in counts:
            raise ConfigError(f"invalid {what} {text!r}: class {name!r} given twice")
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
