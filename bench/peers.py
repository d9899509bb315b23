"""Reference points that ``fairsched bench`` runs side by side with fairsched.

- a plain ``FOR UPDATE SKIP LOCKED`` loop on the seed table, claiming and
  completing 50 jobs per transaction (the ceiling a bare queue reaches);
- pgqueuer and procrastinate with their own workers (``bench/requirements.txt``), each in
  its own database on the same server: draining no-op jobs, and in the noisy
  neighbour's workload (:func:`peer_noisy_run`).

For throughput, every runner enqueues ``jobs`` no-op jobs first, then measures the
time from the moment all its workers are ready until the last job is done.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import queue as queue_mod
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from typing import Any, NamedTuple

import psycopg

from bench.cputime import CpuMeter, is_backend_of
from bench.sql import QUERIES


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
        conn.execute("VACUUM ANALYZE fairsched_lab.plain_jobs")
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
        row = conn.execute(QUERIES["plain_succeeded"]).fetchone()
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
    async with _pgqueuer_queries(dsn) as queries:
        for start in range(0, jobs, 1000):
            n = min(1000, jobs - start)
            await queries.enqueue(["noop"] * n, [None] * n, [0] * n)


@asynccontextmanager
async def _pgqueuer_queries(dsn: str) -> AsyncIterator[Any]:
    """pgqueuer's queries on a connection of their own, its schema installed."""
    from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
    from pgqueuer.queries import Queries

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        yield queries


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

    @app.task(name="sleep")
    async def sleep(tenant: str, at: float, ms: int) -> None:
        await _noisy_job({"tenant": tenant, "at": at, "ms": ms})

    return app


async def _procrastinate_setup(dsn: str, jobs: int) -> None:
    async with _procrastinate_opened(dsn) as app:
        task = app.tasks["noop"]
        for start in range(0, jobs, 1000):
            await task.batch_defer_async(*([{}] * min(1000, jobs - start)))


@asynccontextmanager
async def _procrastinate_opened(dsn: str) -> AsyncIterator[Any]:
    """procrastinate's app, open, its schema applied."""
    app = _procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        yield app


def _procrastinate_worker(dsn: str, go: MpEvent, ready: Any, concurrency: int) -> None:
    async def main() -> None:
        app = _procrastinate_app(dsn)
        async with app.open_async():
            ready.release()
            go.wait()
            await app.run_worker_async(wait=False, concurrency=concurrency, install_signal_handlers=False)

    asyncio.run(main())


# -- the noisy neighbour on the peers -----------------------------------------


class Started(NamedTuple):
    """A job as a peer's worker started it: its tenant, how long it waited since it was
    enqueued, and when it started (epoch seconds, on this machine's clock)."""

    tenant: str
    wait: float
    at: float


_started: Any = None
"""In a peer's worker process: the queue its jobs report their start to."""


async def _noisy_job(payload: dict[str, Any]) -> None:
    """A noisy-neighbour job: report its start, then sleep its ``ms``."""
    now = time.time()
    _started.put(Started(payload["tenant"], now - payload["at"], now))
    await asyncio.sleep(payload["ms"] / 1000)


Enqueue = Callable[[Sequence[str]], Awaitable[None]]
"""Enqueues one noisy-neighbour job per tenant named."""


@asynccontextmanager
async def _pgqueuer_enqueue(dsn: str, ms: int) -> AsyncIterator[Enqueue]:
    async with _pgqueuer_queries(dsn) as queries:

        async def enqueue(tenants: Sequence[str]) -> None:
            at = time.time()
            payloads = [json.dumps({"tenant": t, "at": at, "ms": ms}).encode() for t in tenants]
            await queries.enqueue(["sleep"] * len(tenants), payloads, [0] * len(tenants))

        yield enqueue


def _pgqueuer_noisy_worker(dsn: str, ready: Any, stop: MpEvent, started: Any, slots: int) -> None:
    async def main() -> None:
        from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            qm = QueueManager(Queries(PsycopgDriver(conn)))

            @qm.entrypoint("sleep")
            async def sleep(job: Any) -> None:
                await _noisy_job(json.loads(job.payload))

            async def stop_when_told() -> None:
                await asyncio.to_thread(stop.wait)
                qm.shutdown.set()

            stopper = asyncio.create_task(stop_when_told())
            ready.release()
            # As in the throughput runs, a worker dequeues its slots' worth per query. Its
            # max_concurrent_tasks cap counts picked jobs until their buffered status is
            # flushed: with it, a worker of 50 ran ~35 jobs/s of these.
            await qm.run(batch_size=slots)
            await stopper

    global _started
    _started = started
    asyncio.run(main())


@asynccontextmanager
async def _procrastinate_enqueue(dsn: str, ms: int) -> AsyncIterator[Enqueue]:
    async with _procrastinate_opened(dsn) as app:
        task = app.tasks["sleep"]

        async def enqueue(tenants: Sequence[str]) -> None:
            at = time.time()
            await task.batch_defer_async(*({"tenant": t, "at": at, "ms": ms} for t in tenants))

        yield enqueue


def _procrastinate_noisy_worker(dsn: str, ready: Any, stop: MpEvent, started: Any, slots: int) -> None:
    async def main() -> None:
        app = _procrastinate_app(dsn)
        async with app.open_async():
            worker = asyncio.create_task(
                app.run_worker_async(concurrency=slots, wait=True, install_signal_handlers=False)
            )
            ready.release()
            await asyncio.to_thread(stop.wait)
            worker.cancel()  # procrastinate stops gracefully: running jobs finish
            with suppress(asyncio.CancelledError):
                await worker

    global _started
    _started = started
    asyncio.run(main())


NOISY_PEERS: dict[str, tuple[Callable[[str, int], Any], Callable[..., None]]] = {
    "pgqueuer": (_pgqueuer_enqueue, _pgqueuer_noisy_worker),
    "procrastinate": (_procrastinate_enqueue, _procrastinate_noisy_worker),
}


@dataclass(frozen=True)
class PeerNoisyRun:
    """The jobs a peer's workers started, and the window (epoch seconds, this machine's clock)."""

    started: list[Started]
    window: tuple[float, float]


def peer_noisy_run(
    name: str,
    dsn: str,
    *,
    workers: int,
    slots: int,
    job_ms: int,
    flood: int,
    small_tenants: Sequence[str],
    small_rate: float,
    seconds: float,
    settle: float,
    flood_tenant: str,
) -> PeerNoisyRun:
    """The noisy neighbour's workload on peer ``name`` (run as it ships: first come, first
    served): ``flood`` jobs of ``flood_tenant`` queued first (none: 0), then ``workers``
    processes of ``slots`` concurrent jobs, then, once all are up and ``settle`` seconds
    later, one job per small tenant ``small_rate`` times a second for ``seconds`` (none
    when ``small_tenants`` is empty; the window then just passes). Returns when every
    small job has started (at most 300 s after the window), or the window passed; raises
    when a worker failed."""
    open_enqueue, target = NOISY_PEERS[name]
    ctx = mp.get_context("spawn")
    ready, stop, started = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(dsn, ready, stop, started, slots)) for _ in range(workers)]
    small_jobs = int(small_rate * seconds) * len(small_tenants)
    seen: list[Started] = []

    def collect(until: Callable[[], bool], deadline: float) -> None:
        while not until() and time.monotonic() < deadline:
            with suppress(queue_mod.Empty):
                seen.append(started.get(timeout=0.1))

    def small_started() -> bool:
        return sum(1 for job in seen if job.tenant != flood_tenant) >= small_jobs

    def stopped() -> bool:
        return not any(proc.is_alive() for proc in procs)

    async def drive() -> tuple[float, float]:
        async with open_enqueue(dsn, job_ms) as enqueue:
            for offset in range(0, flood, 1000):
                await enqueue([flood_tenant] * min(1000, flood - offset))
            for proc in procs:
                proc.start()
            for _ in procs:
                if not await asyncio.to_thread(ready.acquire, True, 120):
                    raise RuntimeError(f"{name} workers were not ready within 120 s")
            await asyncio.sleep(settle)
            begin, window_start = time.monotonic(), time.time()
            for i in range(int(small_rate * seconds) if small_tenants else 0):
                await enqueue(small_tenants)
                await asyncio.sleep(max(0.0, begin + (i + 1) / small_rate - time.monotonic()))
            await asyncio.sleep(max(0.0, begin + seconds - time.monotonic()))
            return window_start, time.time()

    try:
        window = asyncio.run(drive())
        collect(small_started, time.monotonic() + 300)
    finally:
        stop.set()
        collect(stopped, time.monotonic() + 120)  # they finish their jobs, which report
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    failed = [proc.exitcode for proc in procs if proc.exitcode != 0]
    if failed:
        raise RuntimeError(f"{name} workers exited with {failed}")
    return PeerNoisyRun(seen, window)
