"""moto's server, started by `LocalEmulator` as `python -m jobrelay.aws.moto_server`.

One change to moto: its SQS model reads the clock through `unix_time()`, which builds two
datetimes per call, and it reads the clock for every message in the queue on every send
(`Queue.attributes` counts visible messages) and receive. With a few thousand messages in
a queue each call then costs tens of milliseconds and a 2,000-message drain takes minutes.
The replacement returns the same value (seconds since the epoch, UTC) from `time.time()`
when no datetime is given; everything else, the API included, is moto's own.
"""

from __future__ import annotations

import datetime
import sys
import time

import moto.server
import moto.sqs.models as sqs_models
from moto.core.utils import unix_time as moto_unix_time


def _unix_time(dt: datetime.datetime | None = None) -> float:
    return time.time() if dt is None else float(moto_unix_time(dt))


def _unix_time_millis(dt: datetime.datetime | None = None) -> float:
    return _unix_time(dt) * 1000.0


def main(argv: list[str] | None = None) -> None:
    """Run moto's server with the faster clock (same arguments as `python -m moto.server`)."""
    # The SQS model imported both names from moto.core.utils; rebind them where it reads them.
    vars(sqs_models).update(unix_time=_unix_time, unix_time_millis=_unix_time_millis)
    moto.server.main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
