"""The handlers ``fairsched bench`` runs: a no-op that sleeps ``payload["ms"]`` when given."""

from __future__ import annotations

import time

from fairsched.worker.app import App, Job

app = App()


@app.handler("bench")
def run(job: Job) -> None:
    """Do nothing, or sleep for the payload's ``ms``."""
    ms = job.payload.get("ms") if isinstance(job.payload, dict) else None
    if ms:
        time.sleep(ms / 1000)
