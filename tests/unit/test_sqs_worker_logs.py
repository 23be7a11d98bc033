"""`jobrelay.logs`: one format per process, with bound ids on every line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from jobrelay.logs import configure_logging, use_json
from jobrelay.settings import Settings


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        structlog.reset_defaults()
        structlog.contextvars.clear_contextvars()


def test_format_follows_the_setting_and_the_terminal() -> None:
    assert use_json(Settings(log={"format": "auto"}), io.StringIO())
    assert not use_json(Settings(log={"format": "auto"}), _Terminal())
    assert use_json(Settings(log={"format": "json"}), _Terminal())
    assert not use_json(Settings(log={"format": "console"}), io.StringIO())


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_bound_ids_and_stdlib_records_too() -> None:
    stream = io.StringIO()
    configure_logging(Settings(log={"format": "auto", "level": "INFO"}), stream=stream)
    log = structlog.get_logger("jobrelay.test")
    with structlog.contextvars.bound_contextvars(child_id="c1", kind="code2des", attempt=1):
        log.info("working", step=2)
        log.debug("hidden below INFO")
    logging.getLogger("some.library").warning("plain %s", "record")

    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["working", "plain record"]
    first = lines[0]
    assert (first["child_id"], first["kind"], first["attempt"], first["step"]) == (
        "c1",
        "code2des",
        1,
        2,
    )
    assert first["level"] == "info" and first["logger"] == "jobrelay.test"
    assert "timestamp" in first
    assert lines[1]["level"] == "warning" and "child_id" not in lines[1]


@pytest.mark.usefixtures("restore_logging")
def test_a_logged_exception_keeps_its_frames_but_not_their_local_variables() -> None:
    stream = io.StringIO()
    configure_logging(Settings(log={"format": "json"}), stream=stream)
    log = structlog.get_logger("jobrelay.test")

    def connect(dsn: str) -> None:
        raise ConnectionError("server closed the connection")

    try:
        connect("postgresql://app:hunter2@db/app")
    except ConnectionError:
        log.exception("loop.failing")
    line = json.loads(stream.getvalue().splitlines()[-1])
    (exception,) = line["exception"]
    assert exception["exc_type"] == "ConnectionError"
    assert [frame["name"] for frame in exception["frames"]][-1] == "connect"
    assert "hunter2" not in stream.getvalue()
