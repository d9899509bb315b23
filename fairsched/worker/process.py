"""A worker process: pooled slots per queue, claiming, heartbeats and batched completions.

One process holds one connection pool. Per queue a claimer thread leases a
bounded batch (at most its free slots) and hands each lease to a slot: a
thread for sync handlers, a task on one shared event loop for async ones
(:mod:`~fairsched.worker.runner`). No transaction is open while a handler runs.
Finished attempts go to one finisher thread that records successes and failures
in batches, one statement each (:mod:`~fairsched.worker.finisher`); a completion
whose lease no longer held is never reported as done. One heartbeat thread renews
the leases of jobs whose progress advanced (:mod:`~fairsched.worker.heartbeat`).
Wake-ups come from ``LISTEN`` and from a periodic poll; a recovery sweeper moves
expired leases on, and a head keeper raises the claim heads past the jobs claimed.

SIGTERM/SIGINT stops claiming, lets running jobs finish within the grace
period, then releases (fenced) what still runs; a second signal cuts the grace
short (:mod:`~fairsched.worker.runtime`). Database outages never end the worker:
claims, completions and heartbeats back off and retry.

This module is the process itself: it loads the app, waits for its database and
its queues, runs the runtime and turns signals into a graceful stop.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterable, Mapping
from types import FrameType

from psycopg.conninfo import make_conninfo

from fairsched.client import Client
from fairsched.config import capacity
from fairsched.db.connection import connect, operation, redact
from fairsched.db.sql import QUERIES
from fairsched.engine import enqueue
from fairsched.errors import ConfigError, InvalidInput, UnknownQueue
from fairsched.settings import Settings
from fairsched.worker.app import App
from fairsched.worker.runtime import Runtime
from fairsched.worker.service import TRANSIENT, backoff_delay

log = logging.getLogger(__name__)

MAX_SLOTS = 1000
APPLICATION_NAME = "fairsched-worker"


# -- entry points used by the CLI ------------------------------------------


def load_app(spec: str) -> App:
    """Import ``module:attribute`` and return the :class:`App` it names.

    The current directory is importable, as when running ``python -m``.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app {spec!r}: expected module:attribute, e.g. mypkg.jobs:app")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"--app {spec!r}: cannot import {module_name!r}: {e}") from None
    target = getattr(module, attr, None)
    if not isinstance(target, App):
        kind = "missing" if target is None else f"a {type(target).__name__}"
        raise ConfigError(f"--app {spec!r}: {module_name}.{attr} is {kind}, not a fairsched App")
    return target


def parse_queue_slots(items: Iterable[str]) -> dict[str, int]:
    """``["emails=8", "reports=2"]`` → ``{"emails": 8, "reports": 2}``."""
    slots: dict[str, int] = {}
    for item in items:
        name, sep, count = item.partition("=")
        if not sep:
            raise InvalidInput(f"--queue {item!r}: expected queue=slots, e.g. emails=8")
        enqueue.check_queue_name(name)
        if not count.strip().isdigit() or not 1 <= int(count) <= MAX_SLOTS:
            raise InvalidInput(f"--queue {item!r}: slots must be a whole number from 1 to {MAX_SLOTS}")
        if name in slots:
            raise InvalidInput(f"--queue {name!r} given twice")
        slots[name] = int(count)
    if not slots:
        raise InvalidInput("give at least one --queue queue=slots")
    return slots


def run_worker(
    app: App,
    queues: Mapping[str, int],
    settings: Settings,
    *,
    dsn: str,
    owner: str | None = None,
    metrics_port: int | None = None,
) -> int:
    """Run a worker in this (main) thread until SIGTERM/SIGINT; returns the exit code."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    owner = enqueue.check_label("owner", owner or f"{socket.gethostname()}:{os.getpid()}", 200)
    worker = Worker(app, queues, settings, dsn=dsn, owner=owner)
    worker.install_signal_handlers()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port)
    return worker.run()


class Worker:
    """One worker process: waits for its database, runs, and stops on a signal."""

    def __init__(
        self, app: App, queues: Mapping[str, int], settings: Settings, *, dsn: str, owner: str
    ) -> None:
        for name in queues:
            app.handler_for(name)
        self.app = app
        self.queues = capacity.Split.of(queues)
        self.settings = settings
        self.owner = owner
        self._dsn = dsn
        self._stop = threading.Event()
        self._hurry = threading.Event()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: shut down gracefully; a second one skips the rest of the grace."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()

    def stop(self) -> None:
        """Ask the worker to shut down, as SIGTERM does."""
        self._stop.set()

    def run(self) -> int:
        """Run until stopped; returns the exit code."""
        names = ", ".join(f"{name}={slots}" for name, slots in self.queues.items())
        log.info("worker %s starting: queues %s on %s", self.owner, names, redact(self._dsn))
        client = self._connect()
        if client is None:
            return 0
        runtime = Runtime(
            self.app,
            self.queues,
            self.settings,
            client,
            self._stop,
            self._hurry,
            dsn=self._dsn,
            owner=self.owner,
        )
        try:
            runtime.run()
        finally:
            client.close()
        log.info("worker %s stopped", self.owner)
        return 1 if runtime.failed else 0

    def _connect(self) -> Client | None:
        """A client with its pool open once every queue is found declared, waiting out
        outages; ``None`` when stopped first. Raises :class:`UnknownQueue`."""
        failures = 0
        while not self._stop.is_set():
            client: Client | None = None
            try:
                missing = self._undeclared_queues()
                if missing:
                    raise UnknownQueue(missing[0])
                pool_size = self.settings.pool_max_size or sum(self.queues.values()) + 4
                dsn = make_conninfo(self._dsn, application_name=APPLICATION_NAME)
                client = Client(dsn, settings=self.settings, pool_size=pool_size)
                client.pool  # noqa: B018 - opens the pool, or fails now
                return client
            except TRANSIENT as e:
                if client is not None:
                    client.close()
                delay = backoff_delay(failures, cap=5.0)
                log.warning("database not reachable (%s); retrying in %.1fs", redact(str(e)), delay)
                failures += 1
                self._stop.wait(delay)
        return None

    def _undeclared_queues(self) -> list[str]:
        with connect(self._dsn) as conn, operation("queue_get"):
            return [
                name
                for name in self.queues
                if conn.execute(QUERIES["queue_get"], {"name": name}).fetchone() is None
            ]
