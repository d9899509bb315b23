"""Handlers for the cancellation tests: each runs until it is cancelled (or 60 s pass).

``cancel_sync`` reports progress every 20 ms and lets :class:`JobCancelled` through;
``cancel_async`` awaits a long sleep (its task is cancelled); ``cancel_ignore`` checks
``job.cancelled`` and returns normally, completing the job; ``cancel_race`` works
``payload["ms"]`` milliseconds in steps, then reports its last progress and returns.
"""

from __future__ import annotations

import asyncio
import time

from fairsched.worker.app import App, Job

app = App()
LONG = 60.0


@app.handler("cancel_sync")
def run_sync(job: Job) -> None:
    """Work in small steps until a cancel stops it."""
    deadline = time.monotonic() + LONG
    step = 0
    while time.monotonic() < deadline:
        step += 1
        job.progress(step)  # raises JobCancelled once a cancel was requested
        time.sleep(0.02)


@app.handler("cancel_async")
async def run_async(job: Job) -> None:
    """Wait long; the worker cancels the task."""
    job.progress("started")
    await asyncio.sleep(LONG)


@app.handler("cancel_ignore")
def run_ignoring(job: Job) -> None:
    """Stop early when asked, and return as if done: the job completes."""
    deadline = time.monotonic() + LONG
    while time.monotonic() < deadline and not job.cancelled:
        time.sleep(0.02)


@app.handler("cancel_race")
def run_briefly(job: Job) -> None:
    """A short job: steps of 5 ms with progress, then done."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    for step in range(int(payload.get("ms", 50)) // 5):
        job.progress(step)
        time.sleep(0.005)
    job.progress("done")
