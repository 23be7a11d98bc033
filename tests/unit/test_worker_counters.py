"""`WorkerCounters` counts each event into `WorkerStats` and `WorkerMetrics` at once, under
the stats fields and metric names the worker always had (issue 41)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from jobrelay.jobs.claims import Completion
from jobrelay.jobs.counters import WorkerCounters
from jobrelay.jobs.metrics import WorkerMetrics
from jobrelay.jobs.models import ClaimedJob, frees_claims
from jobrelay.jobs.worker_config import WorkerStats


def _job(*, source_key: str | None = None, cls: str = "default") -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(),
        type="t.one",
        payload={},
        revision=1,
        claim_token=uuid.uuid4(),
        attempt_count=1,
        max_attempts=3,
        source_key=source_key,
        concurrency_class=cls,
        parent_id=None,
    )


def _counters() -> tuple[WorkerCounters, WorkerStats, WorkerMetrics]:
    stats, metrics = WorkerStats(), WorkerMetrics()
    return WorkerCounters(stats, metrics), stats, metrics


def _sample(metrics: WorkerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


@pytest.mark.parametrize(
    ("status", "field", "metric", "labels"),
    [
        (Completion.COMPLETED, "completed", "jobrelay_jobs_completed_total", {"type": "t.one"}),
        (Completion.REQUEUED, "requeued", None, {}),
        (Completion.FAILED, "failed", "jobrelay_jobs_failed_total", {"type": "t.one"}),
        (
            Completion.DEFERRED,
            "deferred",
            "jobrelay_jobs_rows_deferred_total",
            {"write": "complete"},
        ),
        (Completion.LOST, "lease_lost", "jobrelay_jobs_lease_lost_total", {}),
    ],
)
def test_a_completion_counts_in_stats_and_metrics(
    status: Completion, field: str, metric: str | None, labels: dict[str, str]
) -> None:
    counters, stats, metrics = _counters()
    counters.completion(_job(), status)
    assert getattr(stats, field) == 1
    changed = {k for k, v in dataclasses.asdict(stats).items() if v}
    assert changed == {field}
    if metric is not None:
        assert _sample(metrics, metric, **labels) == 1


def test_each_event_counts_both_sides() -> None:
    counters, stats, metrics = _counters()
    job = _job(cls="ai")
    counters.claimed([job, _job()])
    counters.claim_race()
    counters.error()
    counters.released()
    counters.retried(job)
    counters.failed(job)
    counters.parents_ended(2)
    counters.refused("checked")
    counters.refused("split")
    counters.deferred("heartbeat", 3)
    counters.started(job)
    counters.claim_took(0.01)
    counters.handler_ran(job, 0.02)
    assert (stats.claims, stats.claimed, stats.claim_races, stats.errors) == (1, 2, 1, 1)
    assert (stats.released, stats.retried, stats.failed, stats.parents_ended) == (1, 1, 1, 2)
    assert (stats.split_out, stats.deferred) == (1, 3)
    assert _sample(metrics, "jobrelay_jobs_claimed_total", type="t.one") == 2
    assert _sample(metrics, "jobrelay_jobs_released_total") == 1
    assert _sample(metrics, "jobrelay_jobs_retried_total", type="t.one") == 1
    assert _sample(metrics, "jobrelay_jobs_failed_total", type="t.one") == 1
    assert _sample(metrics, "jobrelay_jobs_rows_refused_total", found="checked") == 1
    assert _sample(metrics, "jobrelay_jobs_rows_refused_total", found="split") == 1
    assert _sample(metrics, "jobrelay_jobs_rows_deferred_total", write="heartbeat") == 3
    assert _sample(metrics, "jobrelay_jobs_running", **{"class": "ai"}) == 1
    assert _sample(metrics, "jobrelay_claim_latency_seconds_count") == 1
    assert _sample(metrics, "jobrelay_handler_duration_seconds_count", type="t.one") == 1
    counters.ended(job)
    assert _sample(metrics, "jobrelay_jobs_running", **{"class": "ai"}) == 0


def test_frees_claims_for_a_source_or_a_capped_class() -> None:
    assert frees_claims(_job(source_key="s"), capped=())
    assert frees_claims(_job(cls="ai"), capped={"ai"})
    assert not frees_claims(_job(cls="ai"), capped={"io"})
