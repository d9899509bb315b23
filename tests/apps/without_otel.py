"""A worker process that runs without OpenTelemetry's SDK, and reports which of
OpenTelemetry's modules it imported (``python -m apps.without_otel worker ARGS``).

``$WITHOUT_OTEL_MODE``: ``absent`` makes every ``opentelemetry`` module unimportable (as
when the ``otel`` extra is not installed; each attempt is recorded), ``api`` leaves the API
importable with no tracer provider set (an application that configured no SDK). Before the
worker starts, the process enqueues one job on ``plain`` and one on ``plain_async``; with
``api``, also one on ``plain`` in the context of :data:`REMOTE` (a request's incoming
header), whose handler enqueues a follow-up job. At exit it writes
``{"tried": [...], "loaded": [...]}`` to ``$WITHOUT_OTEL_REPORT``.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from fairsched.worker.app import App, Job

app = App()
TRIED: list[str] = []
REMOTE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@app.handler("plain")
def work(job: Job) -> None:
    job.progress("done")
    if job.payload.get("follow_up"):
        from fairsched import Client

        with Client(os.environ["FAIRSCHED_DATABASE_URL"], pool_size=1) as client:
            client.enqueue("plain", {}, tenant=job.tenant)


@app.handler("plain_async")
async def work_async(job: Job) -> None:
    await asyncio.sleep(0)


class Unimportable(MetaPathFinder):
    """Refuses every ``opentelemetry`` module, and records the names asked for."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] == "opentelemetry":
            TRIED.append(fullname)
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def report() -> None:
    loaded = sorted(name for name in sys.modules if name.partition(".")[0] == "opentelemetry")
    Path(os.environ["WITHOUT_OTEL_REPORT"]).write_text(json.dumps({"tried": TRIED, "loaded": loaded}))


if __name__ == "__main__":
    if os.environ["WITHOUT_OTEL_MODE"] == "absent":
        sys.meta_path.insert(0, Unimportable())
    atexit.register(report)

    from fairsched import Client
    from fairsched.cli.main import main

    with Client(os.environ["FAIRSCHED_DATABASE_URL"]) as client:
        client.enqueue("plain", {}, tenant="t")
        client.enqueue("plain_async", {}, tenant="t")
        if os.environ["WITHOUT_OTEL_MODE"] == "api":
            from opentelemetry import context, propagate

            context.attach(propagate.extract({"traceparent": REMOTE}))
            client.enqueue("plain", {"follow_up": True}, tenant="t")
    sys.argv = ["fairsched", *sys.argv[1:]]
    main()
