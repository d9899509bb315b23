"""Handlers for the operator command tests: queue ``ops`` sleeps ``payload["ms"]`` and
raises a retryable error when ``payload["fail"]`` is true."""

from __future__ import annotations

import time

from fairsched.errors import RetryableError
from fairsched.worker.app import App, Job

app = App()


@app.handler("ops")
def run(job: Job) -> None:
    """Sleep, then fail when asked to."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    time.sleep(payload.get("ms", 0) / 1000)
    if payload.get("fail"):
        raise RetryableError("asked to fail")
