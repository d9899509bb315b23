"""Wake-ups: a dedicated ``LISTEN`` connection that nudges the claimers.

A notification is only a hint: claimers always re-query the table, and they
poll on their own every ``poll_interval_seconds``, so a dropped listener slows
nothing but latency. The listener reconnects with jittered, capped backoff and
wakes every claimer after each (re)connect, for what it may have missed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from psycopg.conninfo import make_conninfo

from fairsched.db.connection import connect, operation, redact
from fairsched.db.sql import QUERIES
from fairsched.errors import DatabaseError
from fairsched.worker.service import Service, backoff_delay

log = logging.getLogger(__name__)

CHANNEL = "fairsched_jobs"
APPLICATION_NAME = "fairsched-listener"
"""The listener's ``application_name`` in ``pg_stat_activity``."""


class Listener(Service):
    """Calls ``wake(queue)`` for each notification, and ``wake(None)`` after each connect."""

    def __init__(self, dsn: str, wake: Callable[[str | None], None], *, max_backoff: float = 10.0) -> None:
        super().__init__("fairsched-listener")
        self._dsn = make_conninfo(dsn, application_name=APPLICATION_NAME)
        self._wake = wake
        self._max_backoff = max_backoff

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as e:
                delay = backoff_delay(failures, cap=self._max_backoff)
                expected = isinstance(e, DatabaseError | psycopg.Error)
                log.warning(
                    "listener disconnected (%s); reconnecting in %.1fs",
                    redact(str(e)),
                    delay,
                    exc_info=None if expected else e,
                )
                failures += 1
                self._stop.wait(delay)
            else:
                failures = 0

    def _listen(self) -> None:
        with connect(self._dsn) as conn:
            with operation("jobs_listen"):
                conn.execute(QUERIES["jobs_listen"])
            self._wake(None)
            while not self._stop.is_set():
                for notify in conn.notifies(timeout=0.5):
                    self._wake(notify.payload)
