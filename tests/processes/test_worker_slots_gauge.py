"""``fairsched_worker_slots``: each queue's entitlement in a real worker serving two queues,
scraped from its ``--metrics-port`` (static split, and weighted split with borrowing)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from test_capacity import client, workers
from worker_support import Workers, free_port, wait_for

from fairsched import Client, JobSpec

# The capacity tests' fixtures: their runs table, queues emails and reports, and workers
# running their app.
__all__ = ["client", "workers"]


def gauges(port: int) -> dict[str, float]:
    """The worker's slot gauges by queue: {"slots emails": 6.0, "busy emails": 0.0, ...}."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        for name, short in (("fairsched_worker_slots{", "slots"), ("fairsched_worker_slots_busy{", "busy")):
            if line.startswith(name):
                queue = line.split('queue="', 1)[1].split('"', 1)[0]
                found[f"{short} {queue}"] = float(line.rsplit(" ", 1)[1])
    return found


def served(port: int) -> dict[str, float]:
    """The gauges once both queues' runners have started."""

    def both() -> dict[str, float]:
        found = gauges(port)
        return found if found.keys() >= {"slots emails", "slots reports"} else {}

    return wait_for(both, "the worker serves both queues' gauges")


def test_a_static_split_reports_each_queues_slots(client: Client, workers: Workers) -> None:
    port = free_port()
    workers.start({"emails": 3, "reports": 1}, extra_args=("--metrics-port", str(port)))
    seen = served(port)
    assert (seen["slots emails"], seen["slots reports"]) == (3, 1)


def test_a_weighted_split_reports_entitlements_and_borrowing_shows_as_busy(
    client: Client, workers: Workers, tmp_path: Path
) -> None:
    config = tmp_path / "weights.toml"
    config.write_text("[queues.emails]\nweight = 3\n\n[queues.reports]\nweight = 1\n")
    port = free_port()
    args = ("--concurrency", "8", "--queue", "emails", "--queue", "reports", "--metrics-port", str(port))
    workers.start({}, settings={"FAIRSCHED_CONFIG": str(config)}, extra_args=args)
    seen = served(port)
    # 8 slots at 3:1: entitled to 6 and 2 (not 8 each, the most either could borrow).
    assert (seen["slots emails"], seen["slots reports"]) == (6, 2)

    # reports idle: emails borrows its slots; the entitlement stays, busy shows the loan.
    client.enqueue_many("emails", [JobSpec({"sleep": 1.0}, "t") for _ in range(40)])

    def lending() -> dict[str, float]:
        found = gauges(port)
        return found if found.get("busy emails") == 8 else {}

    borrowing = wait_for(lending, "emails runs 8 jobs", timeout=60)
    assert (borrowing["slots emails"], borrowing["slots reports"]) == (6, 2)
