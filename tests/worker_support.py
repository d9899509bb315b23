"""Real ``fairsched worker`` processes for tests: start, signal, kill, wait for conditions.

Workers run the console script of this venv with a clean ``FAIRSCHED_*``
environment, ``FAIRSCHED_DATABASE_URL`` pointing at the test database and
``tests/`` on ``PYTHONPATH`` so ``--app apps.probe:app`` imports. Output goes to
a log file per worker (shown by :meth:`WorkerProcess.output` when a test fails)::

    with Workers(dsn, tmp_path) as workers:
        w = workers.start({"probe": 4}, lease_grace=1)
        wait_for(lambda: jobs_in(db, "succeeded") == 10, "all done")
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psycopg

TESTS = Path(__file__).resolve().parent
FAIRSCHED = Path(sys.executable).with_name("fairsched")
PROBE_APP = "apps.probe:app"

FAST_SETTINGS = {
    "FAIRSCHED_POLL_INTERVAL_SECONDS": "0.2",
    "FAIRSCHED_RECOVERY_INTERVAL_SECONDS": "0.2",
    "FAIRSCHED_GRACE_PERIOD_SECONDS": "5",
}
"""Short intervals so tests see recovery and polling within a second."""

T = TypeVar("T")


def wait_for(condition: Callable[[], T], what: str, *, timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(interval)


@dataclass
class WorkerProcess:
    """One ``fairsched worker`` process."""

    proc: subprocess.Popen[bytes]
    owner: str
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, sig: signal.Signals) -> None:
        """Deliver a real signal (SIGTERM, SIGKILL, SIGSTOP, SIGCONT, …)."""
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        """The exit code, waiting at most ``timeout`` seconds."""
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit code."""
        if self.proc.poll() is None:
            self.send(signal.SIGTERM)
        return self.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Workers:
    """Starts worker processes against one database and reaps them all on exit."""

    def __init__(self, dsn: str, log_dir: Path, app: str = PROBE_APP) -> None:
        self.dsn = dsn
        self.log_dir = log_dir
        self.app = app
        self.started: list[WorkerProcess] = []

    def start(
        self,
        queues: Mapping[str, int],
        *,
        owner: str | None = None,
        settings: Mapping[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        command: tuple[str, ...] = (str(FAIRSCHED),),
    ) -> WorkerProcess:
        """Start ``fairsched worker`` for ``queues`` (name -> slots) with fast settings
        (``command``: what runs instead of the console script, given the same arguments)."""
        owner = owner or f"w{len(self.started) + 1}-{uuid.uuid4().hex[:6]}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
        env.update(FAST_SETTINGS)
        env.update(settings or {})
        env["FAIRSCHED_DATABASE_URL"] = self.dsn
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        args = [*command, "worker", "--app", self.app, "--owner", owner]
        for name, slots in queues.items():
            args += ["--queue", f"{name}={slots}"]
        log = self.log_dir / f"{owner}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([*args, *extra_args], env=env, stdout=out, stderr=subprocess.STDOUT)
        worker = WorkerProcess(proc, owner, log)
        self.started.append(worker)
        return worker

    def close(self) -> None:
        """Kill whatever still runs (a stopped process is continued so it can die)."""
        for worker in self.started:
            if worker.proc.poll() is None:
                worker.send(signal.SIGKILL)
                worker.send(signal.SIGCONT)
                worker.proc.wait(10)

    def logs(self) -> str:
        return "\n".join(f"--- {w.owner} (pid {w.pid}) ---\n{w.output()}" for w in self.started)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def running_workers(dsn: str, log_dir: Path, app: str = PROBE_APP) -> Iterator[Workers]:
    """:class:`Workers`, reaped at the end; their logs are printed then (pytest shows
    them for a failed test)."""
    workers = Workers(dsn, log_dir, app)
    try:
        yield workers
    finally:
        workers.close()
        print(workers.logs())


def listener_pids(db: psycopg.Connection) -> set[int]:
    """Backend pids of the workers' LISTEN connections in this database."""
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'fairsched-listener'"
    ).fetchall()
    return {row[0] for row in rows}


def wait_listening(db: psycopg.Connection, count: int) -> None:
    """Wait until ``count`` workers have their LISTEN connection up (they are running)."""
    wait_for(lambda: len(listener_pids(db)) >= count, f"{count} listening workers")


def statuses(db: psycopg.Connection) -> dict[str, int]:
    """Job counts by status."""
    rows = db.execute("SELECT status, count(*) FROM fairsched.jobs GROUP BY status").fetchall()
    return {status: count for status, count in rows}


def job_row(db: psycopg.Connection, job_id: int) -> dict[str, object]:
    """A job's row as a dict."""
    cur = db.execute("SELECT * FROM fairsched.jobs WHERE id = %s", (job_id,))
    row = cur.fetchone()
    assert row is not None, f"job {job_id} is gone"
    names = [d.name for d in cur.description or []]
    return dict(zip(names, row, strict=True))
