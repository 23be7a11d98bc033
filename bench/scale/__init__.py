"""How costs grow with data: `bench.scale.jobs` (the jobs engine) and `bench.scale.batches`."""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass(frozen=True)
class RunInfo:
    """When, at which commit and under what load a scale run started (taken before anything
    is timed); `footer()` adds the load at the end, for the line printed under the table."""

    started: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ"))
    commit: str = field(
        default_factory=lambda: subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    )
    load_before: tuple[float, float, float] = field(default_factory=os.getloadavg)

    def footer(self) -> str:
        after = os.getloadavg()
        return (
            f"date {self.started}, commit {self.commit}, {platform.node()} "
            f"({os.cpu_count()} cores), load average before "
            f"{self.load_before[0]:.2f}/{self.load_before[1]:.2f}, "
            f"after {after[0]:.2f}/{after[1]:.2f}"
        )
