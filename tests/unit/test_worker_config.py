"""Slots, caps and failpoints as text: parsed exactly, every error names the value."""

from __future__ import annotations

import pytest

from jobrelay.domain.jobs_config import ConfigError, parse_class_counts, parse_failpoints
from jobrelay.jobs.failpoints import Failpoints, InjectedFailure
from jobrelay.jobs.worker import WorkerConfig


def test_class_counts_parse() -> None:
    assert parse_class_counts("ai=2, default=8", what="--slots") == {"ai": 2, "default": 8}
    # classes are data: any well-formed name, e.g. one a user's job types declare
    assert parse_class_counts("gpu=1", what="--slots") == {"gpu": 1}
    assert parse_class_counts("", what="caps") == {}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("ai=x", "'x' is not an integer"),
        ("GPU=1", "invalid concurrency class 'GPU'"),
        ("ai=1,ai=2", "given twice"),
        ("ai", "expected CLASS=N"),
        ("ai=-1", "must be >= 0"),
    ],
)
def test_bad_class_counts_name_the_value(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_class_counts(text, what="--slots", minimum=0)
    assert "--slots" in str(info.value) and named in str(info.value)


def test_failpoints_fire_the_given_number_of_times() -> None:
    assert parse_failpoints("batch.after_parent=2,child.before_reconcile") == {
        "batch.after_parent": 2,
        "child.before_reconcile": None,
    }
    with pytest.raises(ConfigError, match="nowhere"):
        parse_failpoints("nowhere")
    points = Failpoints.parse("batch.after_parent=2")
    for _ in range(2):
        with pytest.raises(InjectedFailure):
            points.hit("batch.after_parent")
    points.hit("batch.after_parent")
    points.hit("dispatch.before_children")
    assert points.hits == {"batch.after_parent": 3}


def test_worker_config_slots_and_totals() -> None:
    shared = WorkerConfig(concurrency=4, known_classes=("ai", "default"))
    assert shared.class_slots == {"ai": 4, "default": 4} and shared.total_slots == 4
    assert WorkerConfig(concurrency=3).class_slots == {"default": 3}
    split = WorkerConfig(slots={"ai": 2, "default": 8})
    assert split.total_slots == 10 and split.classes == ("ai", "default")
    only_ai = WorkerConfig(slots={"ai": 3, "default": 0})
    assert only_ai.classes == ("ai",)
    with pytest.raises(ValueError, match="at least one class"):
        WorkerConfig(slots={"ai": 0})
    with pytest.raises(ValueError, match="prefetch"):
        WorkerConfig(prefetch=-1)
