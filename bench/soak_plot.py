"""Plot soak CSVs (bench/soak.py): claim p50/p99 and dead tuples of `jobs` over time.

    .venv/bin/python -m bench.soak_plot free.csv pinned.csv --png docs/images/soak.png

Each CSV is one line per plot, labelled by its file name; the first line of each CSV (the
`# soak ...` header: date, commit, rate, pinned or not) goes under the figure.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def _read(path: Path) -> tuple[str, list[dict[str, float]]]:
    with path.open() as f:
        header = f.readline().lstrip("# ").strip()
        rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return header, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--png", required=True, type=Path)
    args = parser.parse_args()
    fig, (latency, dead) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    headers = []
    for path in args.csv:
        header, rows = _read(path)
        headers.append(header)
        minutes = [r["minute"] for r in rows]
        (p99,) = latency.plot(minutes, [r["claim_p99_ms"] for r in rows], label=f"{path.stem} p99")
        latency.plot(
            minutes,
            [r["claim_p50_ms"] for r in rows],
            linestyle="--",
            color=p99.get_color(),
            label=f"{path.stem} p50",
        )
        dead.plot(minutes, [r["dead_tuples"] for r in rows], label=path.stem)
    latency.set_ylabel("claim of one job (ms)")
    latency.set_yscale("log")
    latency.legend()
    latency.grid(True, which="both", alpha=0.3)
    dead.set_ylabel("dead tuples in jobs")
    dead.set_xlabel("minutes")
    dead.legend()
    dead.grid(True, alpha=0.3)
    fig.text(0.01, 0.005, "\n".join(headers), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    args.png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
