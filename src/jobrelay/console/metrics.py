"""Database-side Prometheus metrics, computed when `/metrics` is scraped.

`scrape()` reads the database group by group (jobs, classes, relay, tables, oldest
transaction) under one deadline; a group that has not answered by then is left out and
`jobrelay_db_scrape_complete` is 0, so a slow database never holds a scrape longer than
the timeout. `exposition()` renders the families in Prometheus text format through a
prometheus_client custom collector.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg import OperationalError
from psycopg.errors import QueryCanceled
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from jobrelay.console import service
from jobrelay.db.pool import Connection, transaction
from jobrelay.db.sql import Queries

_SQL = Queries("jobrelay.console")
ACTIVE_STATUSES = ("pending", "in_progress")

Group = Callable[[Connection], Awaitable[list[Metric]]]


@dataclass
class Scrape:
    """The families read before the deadline; `complete` when every group answered."""

    families: list[Metric] = field(default_factory=list)
    groups_done: int = 0
    complete: bool = False
    duration_s: float = 0.0


async def _jobs(conn: Connection) -> list[Metric]:
    family = GaugeMetricFamily(
        "jobrelay_db_jobs", "Jobs pending or in progress now, by type", labels=["type", "status"]
    )
    unserved = GaugeMetricFamily(
        "jobrelay_db_jobs_unserved",
        "Pending jobs of a type no live worker has a handler for (they wait for a worker "
        "that has one, e.g. during a rolling deploy), by type",
        labels=["type"],
    )
    counts = await service.active_jobs(conn)
    served = await service.served_types(conn)
    for count in counts:
        family.add_metric([count.type, count.status], count.count)
        if served is not None and count.status == "pending" and count.type not in served:
            unserved.add_metric([count.type], count.count)
    return [family, unserved]


def _classes(global_caps: Mapping[str, int]) -> Group:
    async def read(conn: Connection) -> list[Metric]:
        loads = await service.class_loads(conn, global_caps)
        running = GaugeMetricFamily(
            "jobrelay_db_class_running", "Jobs in progress, by class", labels=["class"]
        )
        cap = GaugeMetricFamily(
            "jobrelay_db_class_global_cap",
            "Global cap of the class (JOBRELAY_JOBS_GLOBAL_CAPS as the API knows it)",
            labels=["class"],
        )
        available = GaugeMetricFamily(
            "jobrelay_db_class_available", "Available pending jobs, by class", labels=["class"]
        )
        oldest = GaugeMetricFamily(
            "jobrelay_db_oldest_available_age_seconds",
            "Age of the oldest available pending job, by class (0 when none)",
            labels=["class"],
        )
        workers = GaugeMetricFamily(
            "jobrelay_db_workers_live",
            "Workers with a live heartbeat serving the class",
            labels=["class"],
        )
        for load in loads:
            label = [load.concurrency_class]
            running.add_metric(label, load.running)
            if load.global_cap is not None:
                cap.add_metric(label, load.global_cap)
            available.add_metric(label, load.available)
            oldest.add_metric(label, load.oldest_available_age_s or 0.0)
            workers.add_metric(label, load.workers_live)
        return [running, cap, available, oldest, workers]

    return read


async def _relay(conn: Connection) -> list[Metric]:
    lag = await service.relay_lag(conn)
    return [
        GaugeMetricFamily(
            "jobrelay_db_relay_lag_seconds",
            "Age of the oldest batch item not yet sent (0 when none)",
            value=lag.lag_s,
        ),
        GaugeMetricFamily(
            "jobrelay_db_batch_items_undispatched",
            "Batch items waiting for the relay (not sent, cancelled or failed)",
            value=lag.undispatched,
        ),
    ]


async def _tables(conn: Connection) -> list[Metric]:
    dead = GaugeMetricFamily(
        "jobrelay_db_dead_tuples", "Dead tuples (pg_stat_user_tables)", labels=["table"]
    )
    size = GaugeMetricFamily(
        "jobrelay_db_table_bytes", "Total size with indexes and TOAST", labels=["table"]
    )
    for table in await service.table_health(conn):
        dead.add_metric([table.table], table.dead_tuples)
        size.add_metric([table.table], table.total_bytes)
    return [dead, size]


async def _oldest_transaction(conn: Connection) -> list[Metric]:
    oldest = await service.oldest_transaction(conn)
    return [
        GaugeMetricFamily(
            "jobrelay_db_oldest_xmin_age",
            "Age in transactions of the oldest backend_xmin of another session (0 when none)",
            value=(oldest.xmin_age or 0) if oldest else 0,
        ),
        GaugeMetricFamily(
            "jobrelay_db_oldest_transaction_seconds",
            "Age of the oldest open transaction of another session (0 when none)",
            value=(oldest.xact_age_s or 0.0) if oldest else 0.0,
        ),
    ]


def groups(global_caps: Mapping[str, int]) -> list[Group]:
    """The metric groups, read in this order."""
    return [_jobs, _classes(global_caps), _relay, _tables, _oldest_transaction]


async def scrape(
    pool: AsyncConnectionPool[Connection],
    global_caps: Mapping[str, int],
    *,
    timeout_s: float,
) -> Scrape:
    """Read every group within `timeout_s` (the wait for a connection included)."""
    result = Scrape()
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s), transaction(pool) as conn:
            await service.read_only_snapshot(conn)
            await conn.execute(_SQL.scrape_timeout, {"ms": str(max(1, int(timeout_s * 1000)))})
            for group in groups(global_caps):
                result.families.extend(await group(conn))
                result.groups_done += 1
        result.complete = True
    except TimeoutError:
        pass
    except Exception as exc:  # statement_timeout fired first, or the database went away
        if not _interrupted(exc):
            raise
    result.duration_s = time.monotonic() - started
    return result


def _interrupted(exc: BaseException) -> bool:
    return isinstance(exc, QueryCanceled | OperationalError | PoolTimeout)


class _Families(Collector):
    """A custom collector answering the families one scrape read."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def exposition(result: Scrape) -> bytes:
    """The scrape in Prometheus text format, with its completeness and duration."""
    registry = CollectorRegistry(auto_describe=False)
    meta = [
        GaugeMetricFamily(
            "jobrelay_db_scrape_complete",
            "1 when every database metric group answered within the timeout",
            value=1 if result.complete else 0,
        ),
        GaugeMetricFamily(
            "jobrelay_db_scrape_duration_seconds",
            "Time spent reading the database for this scrape",
            value=result.duration_s,
        ),
    ]
    registry.register(_Families([*result.families, *meta]))
    return generate_latest(registry)
