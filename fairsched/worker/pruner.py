"""The pruner: deletes what is past its queue's retention, from inside every worker process.

Each process prunes every :data:`INTERVAL_SECONDS` with ±50% jitter (and a random
first delay), so many workers do not prune in lockstep; the database lets one batch
run at a time across the cluster and a pruner that finds another one at work skips
its turn (:mod:`fairsched.engine.prune`). Batches are :data:`~fairsched.engine.prune.BATCH`
rows, each in its own short transaction, and never wait for a row a claim holds. Once
it deleted a fifth of the jobs table's rows it vacuums the table, when its role may
(the table's owner): the space of deleted rows is reused only once a vacuum recorded
it, and autovacuum comes at most every ``autovacuum_naptime``.

``FAIRSCHED_PRUNE_INTERVAL_SECONDS`` (read when the worker starts) changes the interval.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Mapping

import psycopg

from fairsched import metrics
from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.engine import prune
from fairsched.errors import ConfigError, FairschedError
from fairsched.worker.service import Service

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 60.0
"""How often each worker prunes, on average, unless the environment says otherwise."""

INTERVAL_RANGE = (0.1, 86_400.0)
INTERVAL_VARIABLE = "FAIRSCHED_PRUNE_INTERVAL_SECONDS"


def interval_from(environ: Mapping[str, str]) -> float:
    """The prune interval ``environ`` asks for, or the default; :class:`ConfigError` when invalid.

    >>> interval_from({}), interval_from({"FAIRSCHED_PRUNE_INTERVAL_SECONDS": "5"})
    (60.0, 5.0)
    """
    raw = environ.get(INTERVAL_VARIABLE)
    if raw is None or not raw.strip():
        return INTERVAL_SECONDS
    low, high = INTERVAL_RANGE
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise ConfigError(f"{INTERVAL_VARIABLE}={raw[:40]!r}: give seconds from {low:g} to {high:g}")
    return value


class Pruner(Service):
    """Runs :meth:`Client.prune` periodically in a background thread."""

    def __init__(self, client: Client, interval: float = INTERVAL_SECONDS) -> None:
        low, high = INTERVAL_RANGE
        if not low <= interval <= high:
            raise ValueError(f"prune interval must be from {low:g} to {high:g} seconds")
        super().__init__("fairsched-pruner")
        self._client = client
        self._interval = interval
        self._deleted = 0
        """Jobs deleted since this pruner's last vacuum of the jobs table."""

    @classmethod
    def from_environment(cls, client: Client) -> Pruner:
        """A pruner on the interval of ``FAIRSCHED_PRUNE_INTERVAL_SECONDS`` (default 60 s)."""
        return cls(client, interval_from(os.environ))

    def _run(self) -> None:
        delay = random.uniform(0, self._interval)
        while not self._stop.wait(delay):
            delay = self._interval * random.uniform(0.5, 1.5)
            self.prune()

    def prune(self) -> None:
        """One pass; database errors are logged and retried at the next interval."""
        try:
            result = self._client.prune()
        except Exception as e:
            expected = isinstance(e, FairschedError | psycopg.Error)
            log.warning("prune failed (%s); retrying later", redact(str(e)), exc_info=None if expected else e)
            return
        for queue, kinds in result.removed.items():
            for kind, count in kinds.items():
                if count:
                    metrics.PRUNED_ROWS.labels(queue, kind).inc(count)
        for queue, error in result.failed.items():
            log.warning("prune of queue %s failed (%s); retrying later", queue, redact(error))
        self._deleted += sum(kinds["finished"] + kinds["dead"] for kinds in result.removed.values())
        self._vacuum()
        if result.total:
            summary = ", ".join(
                f"{queue} {kind} {n}"
                for queue, kinds in result.removed.items()
                for kind, n in kinds.items()
                if n
            )
            log.info("pruned %d rows past retention: %s", result.total, summary)

    def _vacuum(self) -> None:
        """Vacuum the jobs table once enough jobs went (:func:`~fairsched.engine.prune.jobs_vacuum`)."""
        try:
            with self._client.connection() as conn:
                vacuumed = prune.jobs_vacuum(conn, self._deleted)
        except (FairschedError, psycopg.Error) as e:
            log.warning("vacuum after prune failed (%s); retrying later", redact(str(e)))
            return
        if vacuumed:
            log.info("vacuumed the jobs table after %d jobs were pruned", self._deleted)
        if vacuumed or vacuumed is None:
            self._deleted = 0
