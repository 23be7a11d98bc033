"""The emulator's faster SQS clock reads the same time as moto's own."""

from __future__ import annotations

import datetime

from moto.core.utils import unix_time, unix_time_millis

from jobrelay.aws import moto_server


def test_the_fast_clock_agrees_with_motos_clock() -> None:
    moto_now = unix_time()
    fast_now = moto_server._unix_time()
    assert abs(fast_now - moto_now) < 1.0
    assert abs(moto_server._unix_time_millis() - fast_now * 1000.0) < 1000.0


def test_a_given_datetime_is_converted_as_moto_does() -> None:
    moment = datetime.datetime(2026, 12, 1, 7, 30, 15, 250000)
    assert moto_server._unix_time(moment) == unix_time(moment)
    assert moto_server._unix_time_millis(moment) == unix_time_millis(moment)
