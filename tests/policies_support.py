"""Helpers for the policy tests: queues with a policy stack, backlogs, concurrent claimers."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from fairsched import Client, QueueSettings
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import Lease


def declare(client: Client, name: str, policies: list[str], **settings: Any) -> None:
    """Declare queue ``name`` with a policy stack and no retry delay."""
    base = {"backoff_base_seconds": 0.0, "backoff_max_seconds": 0.0, "max_attempts": 3}
    client.declare_queue(name, QueueSettings(policies=policies, **{**base, **settings}))


def fill(client: Client, queue: str, tenant: str, count: int, **spec: Any) -> list[int]:
    """Enqueue ``count`` jobs of ``tenant`` in batches; returns their ids."""
    ids: list[int] = []
    for start in range(0, count, 2000):
        size = min(2000, count - start)
        ids += client.enqueue_many(queue, [JobSpec({"n": start + i}, tenant, **spec) for i in range(size)])
    return ids


def claim_concurrently(
    client: Client,
    queue: str,
    *,
    claims: int,
    workers: int = 4,
    batch: int = 1,
    handle: Callable[[Lease], None] | None = None,
) -> list[Lease]:
    """``workers`` threads claim (``batch`` at a time) and complete until ``claims`` jobs
    were claimed or the queue is empty; returns the leases in claim order."""
    taken: list[Lease] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            while True:
                with lock:
                    want = min(batch, claims - len(taken))
                if want <= 0:
                    return
                leases = client.claim(queue, owner=f"w{index}", limit=want)
                if not leases:
                    return
                with lock:
                    taken.extend(leases)
                for lease in leases:
                    if handle is not None:
                        handle(lease)
                client.complete_many(leases)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return taken[:claims] if len(taken) > claims else taken


def shares(leases: list[Lease]) -> dict[str, float]:
    """Each tenant's share of ``leases``, in percent."""
    counts = Counter(lease.tenant for lease in leases)
    return {tenant: 100.0 * n / len(leases) for tenant, n in counts.items()}
