"""Reference points that ``fairsched bench`` runs side by side with fairsched.

- a plain ``FOR UPDATE SKIP LOCKED`` loop on the seed table, claiming and
  completing 50 jobs per transaction (the ceiling a bare queue reaches);
- pgqueuer and procrastinate with their own workers (``bench`` extra), each in
  its own database on the same server.

Every runner enqueues ``jobs`` no-op jobs first, then measures the time from
the moment all its workers are ready until the last job is done.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from typing import Any

import psycopg

from fairsched.cputime import CpuMeter, is_backend_of
from fairsched.sql import QUERIES


@dataclass(frozen=True)
class Throughput:
    """Jobs done over the measured window, and the CPU seconds the runner's clients and its
    server backends used in it, where measured (backends only on a server of this machine)."""

    jobs: int
    seconds: float
    client_cpu: float | None = None
    server_cpu: float | None = None

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


def peers_available() -> dict[str, bool]:
    """Which peer libraries are installed."""
    found = {}
    for name in ("pgqueuer", "procrastinate"):
        try:
            __import__(name)
            found[name] = True
        except ImportError:
            found[name] = False
    return found


# -- plain SKIP LOCKED loop --------------------------------------------------


def plain_loop(dsn: str, *, jobs: int, workers: int, batch: int = 50) -> Throughput:
    """The seed's table and claim, ``batch`` per transaction, ``workers`` connections."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(QUERIES["plain_install"])
        conn.execute(QUERIES["plain_fill"], {"jobs": jobs})
        conn.execute("VACUUM ANALYZE bench_plain.jobs")
        database = conn.info.dbname
    backends: list[int] = []
    client_start, server = 0.0, CpuMeter(())

    def start_clocks() -> None:
        """Run as the barrier lets the loops go, before any of them claims."""
        nonlocal client_start, server
        client_start, server = time.process_time(), CpuMeter(backends)

    ready = threading.Barrier(workers + 1, action=start_clocks)
    done_at: list[float] = []
    server_cpu: list[float] = []

    def loop(n: int) -> None:
        owner = f"plain-{n}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = conn.info.backend_pid
            if is_backend_of(pid, database):
                backends.append(pid)
            ready.wait()
            while True:
                rows = conn.execute(QUERIES["plain_claim"], {"owner": owner, "batch": batch}).fetchall()
                if not rows:
                    break
                conn.execute(
                    QUERIES["plain_complete"],
                    {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows], "owner": owner},
                )
            done_at.append(time.perf_counter())
            if pid in backends:
                server_cpu.append(server.used([pid]))  # before the backend exits

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    client_cpu = time.process_time() - client_start
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM bench_plain.jobs WHERE status = 'succeeded'").fetchone()
    measured = len(server_cpu) == workers
    return Throughput(
        int(row[0]) if row else 0,
        max(done_at) - start,
        client_cpu=client_cpu,
        server_cpu=sum(server_cpu) if measured else None,
    )


# -- peers with their own workers ---------------------------------------------


def _run_processes(target: Any, dsn: str, workers: int, args: tuple[Any, ...]) -> float:
    """Start ``workers`` processes, release them together, return the window until all exit."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    ready = ctx.Semaphore(0)
    procs = [ctx.Process(target=target, args=(dsn, go, ready, *args)) for _ in range(workers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire(timeout=120)
    start = time.perf_counter()
    go.set()
    for p in procs:
        p.join(timeout=600)
        if p.exitcode != 0:
            raise RuntimeError(f"peer worker exited with {p.exitcode}")
    return time.perf_counter() - start


def pgqueuer_run(dsn: str, *, jobs: int, workers: int, batch_size: int = 10) -> Throughput:
    """pgqueuer's QueueManager in drain mode, ``workers`` processes."""
    asyncio.run(_pgqueuer_setup(dsn, jobs))
    seconds = _run_processes(_pgqueuer_worker, dsn, workers, (batch_size,))
    return Throughput(jobs, seconds)


async def _pgqueuer_setup(dsn: str, jobs: int) -> None:
    from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
    from pgqueuer.queries import Queries

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        for start in range(0, jobs, 1000):
            n = min(1000, jobs - start)
            await queries.enqueue(["noop"] * n, [None] * n, [0] * n)


def _pgqueuer_worker(dsn: str, go: MpEvent, ready: Any, batch_size: int) -> None:
    async def main() -> None:
        from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
        from pgqueuer.domain.types import QueueExecutionMode
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            qm = QueueManager(Queries(PsycopgDriver(conn)))

            @qm.entrypoint("noop")
            async def noop(job: Any) -> None:
                return None

            ready.release()
            go.wait()
            await qm.run(mode=QueueExecutionMode.drain, batch_size=batch_size)

    asyncio.run(main())


def procrastinate_run(dsn: str, *, jobs: int, workers: int, concurrency: int = 10) -> Throughput:
    """procrastinate's worker (``wait=False``: exits when the queue is empty)."""
    asyncio.run(_procrastinate_setup(dsn, jobs))
    seconds = _run_processes(_procrastinate_worker, dsn, workers, (concurrency,))
    return Throughput(jobs, seconds)


def _procrastinate_app(dsn: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app


async def _procrastinate_setup(dsn: str, jobs: int) -> None:
    app = _procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        task = app.tasks["noop"]
        for start in range(0, jobs, 1000):
            await task.batch_defer_async(*([{}] * min(1000, jobs - start)))


def _procrastinate_worker(dsn: str, go: MpEvent, ready: Any, concurrency: int) -> None:
    async def main() -> None:
        app = _procrastinate_app(dsn)
        async with app.open_async():
            ready.release()
            go.wait()
            await app.run_worker_async(wait=False, concurrency=concurrency, install_signal_handlers=False)

    asyncio.run(main())
