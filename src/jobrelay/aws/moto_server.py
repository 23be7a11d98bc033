"""moto's server, started by `LocalEmulator` as `python -m jobrelay.aws.moto_server`.

One change to moto: its SQS model reads the clock through `unix_time()`, which builds two
datetimes per call, and it reads the clock for every message in the queue on every send
(`Queue.attributes` counts visible messages) and receive. With a few thousand messages in
a queue each call then costs tens of milliseconds and a 2,000-message drain takes minutes.
The replacement returns the same value (seconds since the epoch, UTC) from `time.time()`
when no datetime is given; everything else, the API included, is moto's own.

The replacement rebinds names inside moto, so it first checks that they are there with the
signature it replaces; a moto that moved them stops the emulator with one line naming its
version instead of running with the slow clock unnoticed. pyproject bounds moto below 6.
"""

from __future__ import annotations

import datetime
import inspect
import sys
import time
from importlib.metadata import version
from types import ModuleType

import moto.server
import moto.sqs.models as sqs_models
from moto.core.utils import unix_time as moto_unix_time

# The names rebound in moto.sqs.models, each `(dt: datetime | None = None) -> float`.
CLOCK_NAMES = ("unix_time", "unix_time_millis")


class IncompatibleMoto(RuntimeError):
    """moto no longer has what the faster clock replaces; the message is one line."""


def _unix_time(dt: datetime.datetime | None = None) -> float:
    return time.time() if dt is None else float(moto_unix_time(dt))


def _unix_time_millis(dt: datetime.datetime | None = None) -> float:
    return _unix_time(dt) * 1000.0


def check_clock(module: ModuleType) -> None:
    """Raise `IncompatibleMoto` unless `module` has both clock functions, each taking one
    optional `dt` argument."""
    for name in CLOCK_NAMES:
        function = getattr(module, name, None)
        if not callable(function):
            raise IncompatibleMoto(_incompatible(f"{module.__name__}.{name} is missing"))
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        if [(p.name, p.default) for p in parameters] != [("dt", None)]:
            raise IncompatibleMoto(
                _incompatible(f"{module.__name__}.{name} is no longer {name}(dt=None)")
            )


def install_fast_clock(module: ModuleType = sqs_models) -> None:
    """Check, then rebind the clock functions where the SQS model reads them."""
    check_clock(module)
    # The SQS model imported both names from moto.core.utils; rebind them where it reads them.
    vars(module).update(unix_time=_unix_time, unix_time_millis=_unix_time_millis)


def main(argv: list[str] | None = None) -> None:
    """Run moto's server with the faster clock (same arguments as `python -m moto.server`)."""
    try:
        install_fast_clock()
    except IncompatibleMoto as error:
        sys.exit(str(error))  # the line on stderr, exit status 1
    moto.server.main(argv if argv is not None else sys.argv[1:])


def _incompatible(reason: str) -> str:
    return (
        f"moto {version('moto')} is not supported by jobrelay's emulator clock patch: "
        f"{reason}; install the moto version that requirements.lock pins"
    )


if __name__ == "__main__":
    main()
