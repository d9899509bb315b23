"""The head keeper: raises the claim heads past claimed jobs, from inside every worker.

Each process refreshes every ``head_refresh_seconds`` with ±50% jitter. A refresh that
finds nothing behind is one read-only statement; many processes may refresh at once
(each row is locked with ``SKIP LOCKED``).
"""

from __future__ import annotations

import logging
import random

import psycopg

from fairsched.client import Client
from fairsched.db import redact
from fairsched.errors import FairschedError
from fairsched.service import Service

log = logging.getLogger(__name__)


class HeadKeeper(Service):
    """Runs :meth:`Client.heads_refresh` periodically in a background thread."""

    def __init__(self, client: Client, interval: float) -> None:
        if not interval > 0:
            raise ValueError("head refresh interval must be positive")
        super().__init__("fairsched-headkeeper")
        self._client = client
        self._interval = interval

    def _run(self) -> None:
        while not self._stop.wait(self._interval * random.uniform(0.5, 1.5)):
            self.refresh()

    def refresh(self) -> None:
        """One refresh; database errors are logged and retried at the next interval."""
        try:
            self._client.heads_refresh()
        except Exception as e:
            expected = isinstance(e, FairschedError | psycopg.Error)
            log.warning(
                "claim head refresh failed (%s); retrying later",
                redact(str(e)),
                exc_info=None if expected else e,
            )
