"""Presence: the worker's row in the registry (:mod:`fairsched.engine.workers`), written at
start, renewed every few seconds, deleted at a clean stop. An outage is logged and the
report retried at the next interval; a worker that dies leaves a row that ages out."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.engine import workers
from fairsched.worker.service import TRANSIENT, Service

log = logging.getLogger(__name__)


class Presence(Service):
    """Reports ``owner`` serving ``queues`` (queue → slots) every
    :data:`~fairsched.engine.workers.REPORT_SECONDS`."""

    def __init__(
        self, client: Client, owner: str, queues: Mapping[str, int], claimed: Callable[[], Mapping[str, int]]
    ) -> None:
        super().__init__("fairsched-presence")
        self._client = client
        self._owner = owner
        self._queues = dict(queues)
        self._claimed = claimed

    def _run(self) -> None:
        self._report()
        while not self._stop.wait(workers.REPORT_SECONDS):
            self._report()

    def _report(self) -> None:
        try:
            with self._client.connection() as conn:
                workers.worker_seen(conn, self._owner, self._queues, self._claimed())
        except TRANSIENT as e:
            log.warning("reporting this worker's presence failed (%s); retrying", redact(str(e)))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reporting and delete the worker's row (best effort)."""
        super().stop(timeout)
        try:
            with self._client.connection() as conn:
                workers.worker_gone(conn, self._owner)
        except TRANSIENT as e:
            log.warning("removing this worker's presence failed (%s); it ages out", redact(str(e)))
