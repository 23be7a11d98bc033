"""The shipped alert rules and Grafana dashboard (issue 25, deploy/monitoring/) against the
metrics jobrelay really exports: the API's /metrics (read from a real database), a jobs
worker's and a relay's metrics endpoints, each scraped over HTTP.

The rules pass `promtool check rules` and their unit tests (`promtool test rules`) where
Debian's `prometheus` package provides promtool (`make test` installs it); with or without
it, their structure is checked and every metric an expression names is on a live /metrics.
Every dashboard panel's queries name live metrics only, and every exported family is on the
dashboard."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import prometheus_client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from jobrelay.batches.relay_metrics import RelayMetrics
from jobrelay.jobs.metrics import WorkerMetrics
from tests.harness import ApiHarness

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "jobrelay-alerts.yml"
RULE_TESTS = MONITORING / "jobrelay-alerts.test.yml"
DASHBOARD = MONITORING / "jobrelay-dashboard.json"
METRIC = re.compile(r"\b(jobrelay_[a-z0-9_]+)\b")
# The sample names a family of each type exposes (prometheus_client's text format).
SUFFIXES = {
    "gauge": ("",),
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


class Exported:
    """Families and sample names of live expositions."""

    def __init__(self, texts: list[str]) -> None:
        self.families: dict[str, str] = {}
        for text in texts:
            for family in text_string_to_metric_families(text):
                self.families[family.name] = family.type
        # A counter's or histogram's `_created` samples parse as a family of their own.
        for name in [n for n in self.families if n.endswith("_created")]:
            if name.removesuffix("_created") in self.families:
                del self.families[name]

    @property
    def samples(self) -> set[str]:
        return {name + suffix for name, kind in self.families.items() for suffix in SUFFIXES[kind]}

    def family_of(self, sample: str) -> str:
        for name, kind in self.families.items():
            if any(sample == name + suffix for suffix in SUFFIXES[kind]):
                return name
        raise AssertionError(f"{sample} is no exported sample")


@pytest.fixture
async def exported(api: ApiHarness) -> Exported:
    """What the API's /metrics (a real scrape of the database), a worker's and a relay's
    metrics endpoints serve now."""
    response = await api.client.get("/metrics", headers=api.headers("root", admin=True))
    assert response.status_code == 200, response.text
    texts = [response.text]
    assert "jobrelay_db_scrape_complete 1.0" in response.text  # every group was read
    with (
        _served(WorkerMetrics().registry) as worker,
        _served(RelayMetrics().registry) as relay,
    ):
        async with httpx.AsyncClient(timeout=10) as client:
            for url in (worker, relay):
                scraped = await client.get(url)
                assert scraped.status_code == 200
                texts.append(scraped.text)
    return Exported(texts)


@contextmanager
def _served(registry: prometheus_client.CollectorRegistry) -> Iterator[str]:
    """`registry` on prometheus_client's HTTP server (as `jobrelay worker --metrics-port`
    and `jobrelay relay --metrics-port` serve theirs): its /metrics URL."""
    server, _thread = prometheus_client.start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    rules = []
    for group in document["groups"]:
        assert set(group) == {"name", "rules"} and group["rules"], group
        rules.extend(group["rules"])
    return rules


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is missing: Debian's prometheus package provides it (make test installs "
    "it as root); the structure and the metric names are still checked below",
)
def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    for command in (["check", "rules", RULES.name], ["test", "rules", RULE_TESTS.name]):
        result = subprocess.run(
            ["promtool", *command], cwd=MONITORING, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


def test_every_rule_is_an_alert_with_severity_and_text_on_live_metrics(
    exported: Exported,
) -> None:
    rules = _rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), names
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"Jobrelay[A-Z][A-Za-z]+", rule["alert"]), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule
        named = set(METRIC.findall(rule["expr"]))
        assert named, f"{rule['alert']} names no jobrelay metric"
        missing = named - exported.samples
        assert not missing, f"{rule['alert']} names {missing}, not on any live /metrics"
    # What the issue asks an operator to be warned of.
    for wanted in (
        "JobrelayBacklogAge",
        "JobrelayJobFailureRate",
        "JobrelayLeaseLosses",
        "JobrelayRelayLag",
        "JobrelayOldestXminAge",
        "JobrelayRelayCircuitOpen",
        "JobrelayNoWorkerForType",
    ):
        assert wanted in names
    # Every alert has a unit test.
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    }
    assert tested == set(names)


def test_the_dashboard_queries_live_metrics_and_shows_every_family(exported: Exported) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        assert key in dashboard, key
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"

    panels = list(_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    shown: set[str] = set()
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["datasource"]["uid"] == "${datasource}", panel
        targets = panel["targets"]
        assert targets, panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            named = set(METRIC.findall(target["expr"]))
            assert named, f"{panel['title']}: {target['expr']} names no jobrelay metric"
            missing = named - exported.samples
            assert not missing, f"{panel['title']} queries {missing}, not on any live /metrics"
            shown |= {exported.family_of(sample) for sample in named}
    assert shown == set(exported.families), set(exported.families) - shown
