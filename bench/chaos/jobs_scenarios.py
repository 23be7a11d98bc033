"""Scenarios against `jobrelay worker` processes draining `chaos.work` jobs: SIGKILL a
random worker every 2 s, SIGSTOP a worker past its lease then SIGCONT it, and
`pg_terminate_backend` storms. Each drains the same number of jobs once without chaos
(clean) and once with it, on the same workers in the same run."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos.app import job_types
from bench.chaos.invariants import Finish, Ledger, check_jobs, read_finishes
from bench.chaos.stack import (
    Database,
    InvariantError,
    Processes,
    base_env,
    percentile,
    wait_until,
)
from jobrelay.db.pool import open_pool
from jobrelay.jobs.enqueue import DEFAULT_PAYLOAD_LIMIT_BYTES, Enqueuer
from jobrelay.jobs.models import EnqueueRequest

FENCED_EVERY = 5  # one job in 5 writes a fenced output row
DUPLICATE_EVERY = 10  # one key in 10 is enqueued twice (must return the same job)


@dataclass
class JobsOptions:
    size: int
    workers: int = 3
    concurrency: int = 8
    handler_ms: int = 5
    lease_s: float = 3.0
    seed: int = 16
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Drain:
    label: str
    jobs: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


@dataclass
class Kill:
    name: str
    pid: int
    at: Any  # database time of the kill
    held: dict[uuid.UUID, uuid.UUID]  # job id -> claim token the dead worker held


def _enqueue(db: Database, prefix: str, opts: JobsOptions, ledger: Ledger) -> Any:
    """Enqueue `size` jobs in one transaction (workers see them all at once); returns the
    database time of the commit. Every returned id goes to the ledger; a duplicate key
    must come back as the same job."""
    requests = [
        EnqueueRequest(
            "chaos.work",
            {"key": f"{prefix}-{n}", "ms": opts.handler_ms, "fenced": n % FENCED_EVERY == 0},
        )
        for n in range(opts.size)
    ]
    enqueuer = Enqueuer(job_types.registry(), payload_limit_bytes=DEFAULT_PAYLOAD_LIMIT_BYTES)

    async def run() -> Any:
        pool = await open_pool(db.dsn, min_size=1, max_size=1)
        try:
            async with pool.connection() as conn:
                async with conn.transaction():
                    ids: list[uuid.UUID] = []
                    for start in range(0, len(requests), 1000):
                        got = await enqueuer.enqueue_many(conn, requests[start : start + 1000])
                        ids.extend(e.id for e in got)
                    again = await enqueuer.enqueue_many(conn, requests[::DUPLICATE_EVERY])
                    if [e.id for e in again] != ids[::DUPLICATE_EVERY]:
                        raise InvariantError("a duplicate enqueue created a second active job")
                cursor = await conn.execute("SELECT clock_timestamp() AS t")
                row = await cursor.fetchone()
                ledger.job_ids.update(ids)
                return None if row is None else row["t"]
        finally:
            await pool.close()

    return asyncio.run(run())


def _completed(db: Database, prefix: str) -> int:
    row = db.one(
        "SELECT count(*) AS n FROM all_jobs WHERE status = 'completed' AND dedupe_key LIKE %s",
        (f"{prefix}-%",),
    )
    return int(row["n"])


def _drain_end(db: Database, prefix: str) -> Any:
    return db.one(
        "SELECT max(finished_at) AS t FROM all_jobs WHERE dedupe_key LIKE %s", (f"{prefix}-%",)
    )["t"]


def _drain_timeout(opts: JobsOptions) -> float:
    return 120 + opts.size / 20


class JobsRun:
    """Workers started once; drains enqueued and awaited on them."""

    def __init__(self, workdir: Path, opts: JobsOptions) -> None:
        self.workdir = workdir
        self.opts = opts
        self.db = Database(workdir).start()
        self.env = base_env(self.db.dsn, workdir, lease_s=opts.lease_s, **opts.env)
        self.procs = Processes(self.env, workdir / "logs")
        self.ledger = Ledger()
        self.rng = random.Random(opts.seed)
        self._next = 0

    def start_worker(self) -> str:
        self._next += 1
        name = f"worker-{self._next}"
        self.procs.start(name, "worker", "--concurrency", str(self.opts.concurrency))
        return name

    def start_fleet(self) -> None:
        for _ in range(self.opts.workers):
            self.start_worker()
        wait_until(self.announced, timeout_s=120, what="the workers to announce themselves")

    def drain(self, prefix: str, during: Any = None) -> Drain:
        """Enqueue a drain and wait for it; `during(progress)` runs every poll."""
        committed = _enqueue(self.db, prefix, self.opts, self.ledger)
        deadline = time.monotonic() + _drain_timeout(self.opts)
        while True:
            done = _completed(self.db, prefix)
            if done >= self.opts.size:
                break
            if time.monotonic() > deadline:
                raise InvariantError(f"{prefix}: {done}/{self.opts.size} completed in time")
            if during is not None:
                during(done)
            time.sleep(0.05)
        end = _drain_end(self.db, prefix)
        return Drain(prefix, self.opts.size, (end - committed).total_seconds())

    def held_by(self, pid: int) -> dict[uuid.UUID, uuid.UUID]:
        rows = self.db.rows(
            "SELECT id, claim_token FROM jobs WHERE status = 'in_progress'"
            " AND split_part(claimed_by, ':', 2) = %s",
            (str(pid),),
        )
        return {r["id"]: r["claim_token"] for r in rows}

    def up(self) -> list[str]:
        """Running workers past their start-up (their heartbeat row exists)."""
        rows = self.db.rows("SELECT split_part(worker_id, ':', 2) AS pid FROM worker_heartbeat")
        pids = {r["pid"] for r in rows}
        return sorted(n for n, p in self.procs.running.items() if str(p.pid) in pids)

    def announced(self) -> bool:
        """Every running worker past its start-up (its heartbeat row exists), so that a
        SIGTERM finds its signal handlers installed."""
        pids = {str(p.pid) for p in self.procs.running.values()}
        rows = self.db.rows("SELECT split_part(worker_id, ':', 2) AS pid FROM worker_heartbeat")
        return pids <= {r["pid"] for r in rows}

    def finish(self) -> tuple[list[str], list[Finish]]:
        dead = self.procs.dead()
        wait_until(self.announced, timeout_s=120, what="every worker to be up")
        codes = self.procs.stop_all()
        finishes = read_finishes(self.workdir / "finish")
        problems = check_jobs(self.db.dsn, self.ledger, finishes)
        problems += [f"{name} exited on its own" for name in dead]
        problems += [f"{name} exited {code} on SIGTERM" for name, code in codes.items() if code]
        return problems, finishes

    def close(self) -> None:
        self.procs.stop_all()
        self.db.stop()


def kill_report(run: JobsRun, kills: list[Kill], finishes: list[Finish]) -> dict[str, Any]:
    """Per kill: the jobs the dead worker held that ran again, how many of those had
    already finished their handler (a completion lost with the process), and the time from
    the kill to each one's completion by another worker."""
    finished = {(f.job_id, f.token) for f in finishes}
    ids = [job_id for kill in kills for job_id in kill.held]
    final = {
        r["id"]: r
        for r in run.db.rows(
            "SELECT id, result->>'token' AS token, claimed_at, finished_at FROM all_jobs"
            " WHERE id = ANY(%s)",
            (ids,),
        )
    }
    rerun: list[int] = []
    rerun_finished: list[int] = []
    recovery: list[float] = []
    reclaim: list[float] = []
    for kill in kills:
        again = [j for j, token in kill.held.items() if final[j]["token"] != str(token)]
        rerun.append(len(again))
        rerun_finished.append(sum((j, kill.held[j]) in finished for j in again))
        recovery += [(final[j]["finished_at"] - kill.at).total_seconds() for j in again]
        reclaim += [(final[j]["claimed_at"] - kill.at).total_seconds() for j in again]
    return {
        "kills": len(kills),
        "rerun_per_kill_mean": sum(rerun) / len(kills) if kills else 0.0,
        "rerun_per_kill_max": max(rerun, default=0),
        "rerun_finished_per_kill_mean": sum(rerun_finished) / len(kills) if kills else 0.0,
        "rerun_finished_per_kill_max": max(rerun_finished, default=0),
        "rerun_finished_total": sum(rerun_finished),
        "recovery_p50_s": percentile(recovery, 50),
        "recovery_p99_s": percentile(recovery, 99),
        # kill -> claimed by another worker (the last claim): one lease, plus the wait
        # behind the backlog, since the rescue sets available_at = now (the job goes to the
        # back of the queue)
        "reclaim_p50_s": percentile(reclaim, 50),
        "reclaim_p99_s": percentile(reclaim, 99),
    }


def worker_kill(workdir: Path, opts: JobsOptions, *, every_s: float = 2.0) -> dict[str, Any]:
    """SIGKILL a random worker every `every_s` during a drain of `size` jobs; a replacement
    starts at once, so the fleet keeps its size."""
    run = JobsRun(workdir, opts)
    try:
        run.start_fleet()
        clean = run.drain("clean")
        kills: list[Kill] = []
        next_kill = [0.0]

        def killer(done: int) -> None:
            now = time.monotonic()
            if done < opts.size // 20 or now < next_kill[0]:
                return  # the first kill once the drain is well under way
            up = run.up()
            if len(up) < opts.workers:
                # The next kill waits for the fleet to be whole again: on a busy 2-core
                # machine a worker takes seconds to start, and killing every 2 s whatever
                # is up left no worker running (530 of 3,000 jobs done in 270 s).
                return
            name = run.rng.choice(up)
            pid = run.procs.kill(name)
            at = run.db.now()
            kills.append(Kill(name, pid, at, run.held_by(pid)))
            run.start_worker()
            next_kill[0] = now + every_s

        chaos = run.drain("chaos", during=killer)
        problems, finishes = run.finish()
        if not kills:
            problems.append("the drain ended before the first kill: raise --size")
        report = kill_report(run, kills, finishes)
    finally:
        run.close()
    return {
        "scenario": "worker-kill",
        "size": opts.size,
        "workers": opts.workers,
        "concurrency": opts.concurrency,
        "lease_s": opts.lease_s,
        "clean_jobs_per_s": clean.rate,
        "chaos_jobs_per_s": chaos.rate,
        "chaos_vs_clean": chaos.rate / clean.rate,
        **report,
        "problems": problems,
    }


def worker_stop(workdir: Path, opts: JobsOptions, *, stops: int = 3) -> dict[str, Any]:
    """SIGSTOP a worker holding jobs until every job it held was completed by another
    worker (past its lease), then SIGCONT it: its late completions and fenced outputs must
    be rejected (checked by the invariants), and it keeps working."""
    run = JobsRun(workdir, opts)
    try:
        run.start_fleet()
        clean = run.drain("clean")
        stopped: list[tuple[str, int, dict[uuid.UUID, uuid.UUID]]] = []
        pending = [0]
        stuck = [0]

        def stopper(done: int) -> None:
            if len(stopped) >= stops or done < opts.size * (len(stopped) + 1) // (stops + 2):
                return
            for name in sorted(run.procs.running, key=lambda _: run.rng.random()):
                process = run.procs.running[name]
                held = run.held_by(process.pid)
                if not held:
                    continue
                run.procs.signal(name, signal.SIGSTOP)
                held = run.held_by(process.pid)  # what it holds now that it cannot write
                # Stopped until every job it held was completed by another worker, or for
                # 4 leases: a job whose row its open transaction still locks cannot be
                # taken over until that transaction ends (see `stuck`).
                with contextlib.suppress(InvariantError):
                    wait_until(
                        lambda held=held: _taken_over(run, held),
                        timeout_s=opts.lease_s * 4,
                        what=f"the jobs of stopped {name} to be completed by others",
                    )
                stuck[0] += len(held) - _completed_of(run, held)
                run.procs.signal(name, signal.SIGCONT)
                stopped.append((name, process.pid, held))
                pending[0] += len(held)
                return

        chaos = run.drain("chaos", during=stopper)
        problems, finishes = run.finish()
        if not stopped:
            problems.append("no worker was stopped: raise --size")
        winners = {
            r["id"]: r["token"]
            for r in run.db.rows(
                "SELECT id, result->>'token' AS token FROM all_jobs WHERE id = ANY(%s)",
                ([j for _, _, held in stopped for j in held],),
            )
        }
        late = 0  # stale handlers that finished after SIGCONT and whose completion lost
        for _name, pid, held in stopped:
            late += sum(
                1
                for f in finishes
                if f.pid == pid
                and held.get(f.job_id) == f.token
                and winners[f.job_id] != str(f.token)
            )
    finally:
        run.close()
    return {
        "scenario": "worker-stop",
        "size": opts.size,
        "workers": opts.workers,
        "lease_s": opts.lease_s,
        "stops": len(stopped),
        "jobs_held_by_stopped_workers": pending[0],
        "late_handler_finishes_fenced_off": late,
        "jobs_stuck_while_stopped": stuck[0],
        "clean_jobs_per_s": clean.rate,
        "chaos_jobs_per_s": chaos.rate,
        "chaos_vs_clean": chaos.rate / clean.rate,
        "problems": problems,
    }


def _completed_of(run: JobsRun, held: dict[uuid.UUID, uuid.UUID]) -> int:
    return int(
        run.db.one(
            "SELECT count(*) AS n FROM all_jobs WHERE id = ANY(%s) AND status = 'completed'",
            (list(held),),
        )["n"]
    )


def _taken_over(run: JobsRun, held: dict[uuid.UUID, uuid.UUID]) -> bool:
    rows = run.db.rows(
        "SELECT id, status, result->>'token' AS token FROM all_jobs WHERE id = ANY(%s)",
        (list(held),),
    )
    # A completion the stopped worker's backend was already committing may still land: such
    # a job is done with the stopped worker's own token, which is fine.
    return all(r["status"] == "completed" for r in rows)


def backend_storm(workdir: Path, opts: JobsOptions, *, every_s: float = 1.0) -> dict[str, Any]:
    """Every `every_s`, `pg_terminate_backend` on every connection of the workers (pool,
    claim, flush and LISTEN connections alike) during a drain."""
    run = JobsRun(workdir, opts)
    try:
        run.start_fleet()
        clean = run.drain("clean")
        storms: list[int] = []
        next_storm = [0.0]

        def storm(done: int) -> None:
            now = time.monotonic()
            if done < opts.size // 20 or now < next_storm[0]:
                return
            row = run.db.one(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n"
                " FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                " AND application_name NOT LIKE 'chaos-%%'"
            )
            storms.append(int(row["n"]))
            next_storm[0] = now + every_s

        chaos = run.drain("chaos", during=storm)
        problems, _ = run.finish()
        if not storms or not sum(storms):
            problems.append("no connection was terminated: raise --size")
    finally:
        run.close()
    return {
        "scenario": "backend-storm",
        "size": opts.size,
        "workers": opts.workers,
        "storms": len(storms),
        "connections_terminated": sum(storms),
        "clean_jobs_per_s": clean.rate,
        "chaos_jobs_per_s": chaos.rate,
        "chaos_vs_clean": chaos.rate / clean.rate,
        "problems": problems,
    }
