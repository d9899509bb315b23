"""A worker's background services: a loop in a daemon thread, stopped on request, and
how they ride out database outages (jittered, capped backoff)."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TypeVar

import psycopg

from fairsched.db.connection import redact
from fairsched.errors import DatabaseError

log = logging.getLogger(__name__)

T = TypeVar("T")

TRANSIENT: tuple[type[BaseException], ...] = (DatabaseError, psycopg.Error)
"""Database failures a worker survives by backing off and retrying."""

Crash = Callable[[BaseException], None]
"""What to do when a service thread dies of an unexpected exception."""


def service_thread(name: str, target: Callable[[], None], on_crash: Crash | None = None) -> threading.Thread:
    """A daemon thread running ``target``; an unexpected exception goes to ``on_crash``."""

    def run() -> None:
        try:
            target()
        except BaseException as e:
            if on_crash is None:
                raise
            on_crash(e)

    return threading.Thread(target=run, name=name, daemon=True)


class Service:
    """Runs :meth:`_run` in a daemon thread from :meth:`start` until :meth:`stop`.

    ``_run`` loops until the ``_stop`` event is set.
    """

    def __init__(self, name: str, on_crash: Crash | None = None) -> None:
        self._stop = threading.Event()
        self._thread = service_thread(name, self._run, on_crash)

    def start(self) -> None:
        """Start the loop in its thread."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end and wait for it."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError


def backoff_delay(attempt: int, *, base: float = 0.1, cap: float = 10.0) -> float:
    """Delay before retry number ``attempt`` (from 0): exponential, capped, jittered."""
    ceiling: float = min(cap, base * 2.0 ** min(attempt, 30))
    return ceiling * random.uniform(0.5, 1.0)


def retry_transient(fn: Callable[[], T], *, what: str, give_up: threading.Event) -> T | None:
    """``fn()``, retried with backoff on database failures until it works or ``give_up`` is set."""
    failures = 0
    while True:
        try:
            return fn()
        except TRANSIENT as e:
            if give_up.is_set():
                log.error("%s abandoned: %s", what, redact(str(e)))
                return None
            delay = backoff_delay(failures, cap=5.0)
            if failures == 0:
                log.warning("%s failed (%s); retrying", what, redact(str(e)))
            failures += 1
            give_up.wait(delay)
