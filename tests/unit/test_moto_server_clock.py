"""The emulator's faster SQS clock reads the same time as moto's own, and is installed only
into a moto that still has what it replaces."""

from __future__ import annotations

import datetime
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import moto.sqs.models as sqs_models
import pytest
from moto.core.utils import unix_time, unix_time_millis

from jobrelay.aws import moto_server
from jobrelay.aws.emulator import EmulatorError, LocalEmulator


def test_the_fast_clock_agrees_with_motos_clock() -> None:
    moto_now = unix_time()
    fast_now = moto_server._unix_time()
    assert abs(fast_now - moto_now) < 1.0
    assert abs(moto_server._unix_time_millis() - fast_now * 1000.0) < 1000.0


def test_a_given_datetime_is_converted_as_moto_does() -> None:
    moment = datetime.datetime(2026, 12, 1, 7, 30, 15, 250000)
    assert moto_server._unix_time(moment) == unix_time(moment)
    assert moto_server._unix_time_millis(moment) == unix_time_millis(moment)


# -- the guard: what the patch replaces must exist with the signature it replaces ----------


def _copy_of_sqs_models(**overrides: object) -> ModuleType:
    """A module holding what moto.sqs.models holds, with `overrides` (None removes a name)."""
    module = ModuleType("moto.sqs.models")
    vars(module).update(vars(sqs_models))
    for name, value in overrides.items():
        if value is None:
            del vars(module)[name]
        else:
            vars(module)[name] = value
    return module


def test_the_installed_moto_has_what_the_patch_replaces() -> None:
    moto_server.check_clock(sqs_models)
    assert sqs_models.unix_time is unix_time, "the server child patches; this process does not"


def test_installing_rebinds_both_clock_functions() -> None:
    module = _copy_of_sqs_models()
    moto_server.install_fast_clock(module)
    assert module.unix_time is moto_server._unix_time
    assert module.unix_time_millis is moto_server._unix_time_millis


def _seconds_only() -> float:
    return 0.0


def _two_arguments(dt: datetime.datetime | None = None, tz: object = None) -> float:
    return 0.0


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"unix_time_millis": None}, "moto.sqs.models.unix_time_millis is missing"),
        ({"unix_time": 1.5}, "moto.sqs.models.unix_time is missing"),
        ({"unix_time": _seconds_only}, "unix_time is no longer unix_time(dt=None)"),
        ({"unix_time_millis": _two_arguments}, "unix_time_millis is no longer"),
    ],
)
def test_a_moto_without_the_clock_functions_is_refused_in_one_line(
    overrides: dict[str, object], reason: str
) -> None:
    module = _copy_of_sqs_models(**overrides)
    with pytest.raises(moto_server.IncompatibleMoto) as info:
        moto_server.install_fast_clock(module)
    message = str(info.value)
    assert reason in message
    assert f"moto {version('moto')} " in message
    assert "\n" not in message
    assert module.unix_time is not moto_server._unix_time, "nothing rebound"


def test_the_emulator_reports_the_guards_line_and_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real emulator child whose moto lacks a clock function: sitecustomize runs first.
    (tmp_path / "sitecustomize.py").write_text(
        "import moto.sqs.models\ndel moto.sqs.models.unix_time_millis\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    emulator = LocalEmulator()
    with pytest.raises(EmulatorError) as info:
        emulator.start(timeout_s=60)
    assert str(info.value) == (
        f"the emulator exited with code 1: moto {version('moto')} is not supported by "
        "jobrelay's emulator clock patch: moto.sqs.models.unix_time_millis is missing; "
        "install the moto version that requirements.lock pins"
    )


# -- the locked delete: a send racing a delete is never dropped -----------------------------


class _Queue(sqs_models.Queue):  # a subclass, so patching it leaves moto's class alone
    pass


def test_the_locked_delete_waits_for_the_lock_sends_append_under() -> None:
    import threading

    moto_server.install_locked_delete(_Queue)
    moto_server.install_locked_delete(_Queue)  # idempotent: wrapped once
    assert _Queue.delete_message.jobrelay_locked  # type: ignore[attr-defined]
    assert sqs_models.Queue.delete_message is not _Queue.delete_message
    queue = _Queue("q", region="us-east-1", account_id="123456789012")
    deleted = threading.Event()
    with queue._messages_lock:  # a send appending right now
        worker = threading.Thread(
            target=lambda: (queue.delete_message("already-deleted"), deleted.set())
        )
        queue.deleted_messages.add("already-deleted")
        worker.start()
        assert not deleted.wait(0.2), "the delete ran while a send held the lock"
    worker.join(timeout=10)
    assert deleted.is_set()


def test_the_locked_delete_refuses_a_moto_without_the_lock() -> None:
    class Unlocked:
        def add_message(self, message: object) -> None:
            self.messages = [message]

        def delete_message(self, receipt_handle: str) -> None:
            pass

    with pytest.raises(moto_server.IncompatibleMoto, match="_messages_lock"):
        moto_server.install_locked_delete(Unlocked)
