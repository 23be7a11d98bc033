"""moto's server, started by `LocalEmulator` as `python -m jobrelay.aws.moto_server`.

One change to moto: its SQS model reads the clock through `unix_time()`, which builds two
datetimes per call, and it reads the clock for every message in the queue on every send
(`Queue.attributes` counts visible messages) and receive. With a few thousand messages in
a queue each call then costs tens of milliseconds and a 2,000-message drain takes minutes.
The replacement returns the same value (seconds since the epoch, UTC) from `time.time()`
when no datetime is given; everything else, the API included, is moto's own.

A second change fixes a race in moto: `Queue.delete_message` rebuilds the queue's message
list without the lock (`_messages_lock`) under which `add_message` appends, and the server
is threaded. A send landing while a delete copies the list went into the old list and was
dropped after SQS had acknowledged it (the two-relay test lost 2-10 of 2,000 messages on a
busy machine), and two concurrent deletes lost one of the deletions. The replacement takes
that lock around moto's own delete.

Both replacements rebind names inside moto, so they first check that what they replace is
there with the shape they expect; a moto that moved it stops the emulator with one line
naming its version instead of running with the slow clock or the race unnoticed. pyproject
bounds moto below 6.
"""

from __future__ import annotations

import datetime
import inspect
import sys
import time
from importlib.metadata import version
from types import ModuleType
from typing import Any

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


def check_locked_delete(queue_class: type) -> None:
    """Raise `IncompatibleMoto` unless `queue_class.delete_message(self, receipt_handle)`
    exists and the queue's `add_message` appends under `self._messages_lock`."""
    delete = getattr(queue_class, "delete_message", None)
    add = getattr(queue_class, "add_message", None)
    if not callable(delete) or not callable(add):
        raise IncompatibleMoto(_incompatible("sqs Queue.delete_message/add_message are missing"))
    parameters = list(inspect.signature(delete).parameters)
    if parameters != ["self", "receipt_handle"]:
        raise IncompatibleMoto(
            _incompatible("sqs Queue.delete_message is no longer (self, receipt_handle)")
        )
    if "self._messages_lock" not in inspect.getsource(add):
        raise IncompatibleMoto(
            _incompatible("sqs Queue.add_message no longer appends under _messages_lock")
        )


def install_locked_delete(queue_class: type = sqs_models.Queue) -> None:
    """Check, then make `delete_message` hold the lock `add_message` appends under."""
    check_locked_delete(queue_class)
    moto_delete: Any = getattr(queue_class, "delete_message")  # noqa: B009
    if getattr(moto_delete, "jobrelay_locked", False):
        return

    def delete_message(self: Any, receipt_handle: str) -> None:
        with self._messages_lock:  # a Condition on an RLock: re-entrant, waits release it
            moto_delete(self, receipt_handle)

    delete_message.jobrelay_locked = True  # type: ignore[attr-defined]
    setattr(queue_class, "delete_message", delete_message)  # noqa: B010


def main(argv: list[str] | None = None) -> None:
    """Run moto's server with the faster clock and the locked delete (same arguments as
    `python -m moto.server`)."""
    try:
        install_fast_clock()
        install_locked_delete()
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
