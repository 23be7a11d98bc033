"""Drain ablation of the jobs worker's options, interleaved in one run on one server.

One in-process worker of 10 slots drains N `diag.sleep {seconds: 0}` jobs (no fairness key,
one tenant) under each variant, in a rotated order per rep; the median rate per variant and
its ratio to the first variant are printed with the load average and commit:

    fifo          fair claims off, finished jobs free their slot at once (the worker before
                  issue 17 and the chaos bound)
    fair          fair claims on (the default), slot freed at once
    fair+hold     fair claims on, a finished job keeps its slot until its completion is
                  recorded (the default since the chaos bound)

    .venv/bin/python -m bench.drain_ablation --jobs 5000 --reps 7
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.fairness import _drain
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres
from jobrelay.jobs.worker import WorkerConfig

VARIANTS: dict[str, dict[str, bool]] = {
    "fifo": {"fair_claims": False, "hold_slot_until_recorded": False},
    "fair": {"fair_claims": True, "hold_slot_until_recorded": False},
    "fair+hold": {"fair_claims": True, "hold_slot_until_recorded": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    url = os.environ.get("DATABASE_URL")
    server = None
    if url is None:
        server = EmbeddedPostgres(Path(tempfile.gettempdir()) / "jobrelay-bench-ablation")
        url = server.start()
    try:
        migrate.upgrade(url)
        print(f"# commit {commit} load average {os.getloadavg()}", flush=True)
        names = tuple(VARIANTS)
        rates: dict[str, list[float]] = {name: [] for name in names}
        for rep in range(1, args.reps + 1):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                variant = VARIANTS[name]
                config = WorkerConfig(
                    concurrency=10,
                    fair_claims=variant["fair_claims"],
                    hold_slot_until_recorded=variant["hold_slot_until_recorded"],
                )
                rate = asyncio.run(_drain(url, args.jobs, "fair", config))
                rates[name].append(rate)
                print(f"rep={rep} variant={name} jobs_per_s={rate:.0f}", flush=True)
        base = statistics.median(rates[names[0]])
        for name in names:
            med = statistics.median(rates[name])
            pairs = [r / b for r, b in zip(rates[name], rates[names[0]], strict=True)]
            print(
                f"{name:10} median {med:7.0f} jobs/s  ratio {med / base:.2f}  "
                f"paired min-max {min(pairs):.2f}-{max(pairs):.2f}",
                flush=True,
            )
        print(f"# load average at the end {os.getloadavg()}", flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
