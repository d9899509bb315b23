"""aging: priority that rises with waiting.

Each job carries ``aging_key = enqueued_at - priority * aging_interval`` (epoch
seconds, fixed at enqueue) and claims take the smallest key first. The bound
follows: a job A of priority p enqueued at t_A is overtaken by a job B of
priority q > p enqueued at t_B only when key_B < key_A, that is when
t_B - t_A < (q - p) * aging_interval. So B never overtakes A when it was
enqueued more than ``(q - p) * aging_interval`` after A.

Enqueue keys each job by the queue's ``aging_interval_seconds`` of the time
(``jobs_enqueue``), so the jobs already queued keep the interval they were enqueued
under until they are re-keyed: when a queue's interval changes, :meth:`Aging.reconfigured`
gives every job of the queue that may still be claimed (pending, waiting behind its
aggregate, running (it may be retried) and dead (it may be replayed)) the key enqueue
would give it now, from its ``created_at`` (the enqueue transaction's time) and the
interval stored now (:func:`aging_rekey`).

The re-key walks each status along an index in bounded batches, one short transaction
per batch (:data:`BATCH` rows at most), never one statement over the backlog. Claims
skip the rows a batch holds (``SKIP LOCKED``) for the few milliseconds it takes; a batch
waits for a row a claim or a completion holds. Re-keying is idempotent: a job that
already carries its key is not written, so running it again finishes an interrupted
run. Keys that go down lower the claim heads through the jobs' update trigger. What the
aging bound is while it runs: ``docs/policies.md`` (aging).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Annotated, Any, LiteralString

import psycopg
from psycopg import errors
from psycopg.rows import dict_row
from pydantic import Field

from fairsched import bounds
from fairsched.db.connection import idle, operation
from fairsched.db.sql import load
from fairsched.policy import BasePolicy, ClaimHead, EnqueueColumn, OrderTerm, Setting
from fairsched.policy.registry import queue_stack
from fairsched_policies.queuecolumns import queue_column

STATEMENTS = load([files(__package__) / "aging.sql"])
"""The re-key's statements and the claim head's."""

HEAD = ClaimHead(
    columns=(("aging_key", "'-Infinity'"), ("aging_id", "0")),
    behind=STATEMENTS["aging_head_behind"],
    refresh=STATEMENTS["aging_head_refresh"],
)
"""The head of the aging order: its columns of ``fairsched.claim_heads``, lowered by this
policy's trigger and raised by its refresh (``migrations/aging``)."""

INTERVAL = "aging_interval_seconds"
"""The queue setting the keys follow."""

STACK = "policies"
"""The queue setting that names its policy stack."""

KEY = EnqueueColumn("aging_key", "extract(epoch FROM now()) - i.priority * q.aging_interval_seconds")
"""The key a job gets at enqueue: the enqueue transaction's time, less its priority's
worth of waiting."""


class Aging(BasePolicy):
    """``aging_key, id``: priority worth ``aging_interval_seconds`` of waiting per level."""

    name = "aging"

    def job_order(self) -> Sequence[OrderTerm]:
        return (OrderTerm("aging_key"), OrderTerm("id"))

    def claim_head(self) -> ClaimHead:
        return HEAD

    def enqueue_columns(self) -> Sequence[EnqueueColumn]:
        return (KEY,)

    def migrations(self) -> Traversable:
        return files("fairsched_policies") / "migrations" / "aging"

    def reconfigured(self, conn: psycopg.Connection, queue: str, changed: frozenset[str]) -> int:
        """Re-key the queue's jobs when its interval changed, or when its stack changed to
        one with this policy (jobs enqueued on a stack without it carry their enqueue time
        as their key, whatever their priority)."""
        joined = STACK in changed and self.name in queue_stack(conn, queue).names
        return aging_rekey(conn, queue).rekeyed if INTERVAL in changed or joined else 0

    def settings(self) -> tuple[Setting]:
        return (INTERVAL_SETTING,)


INTERVAL_SETTING = queue_column(
    INTERVAL,
    Annotated[float, Field(gt=0, le=bounds.AGING_INTERVAL_MAX_SECONDS, allow_inf_nan=False)],
    default=60.0,
    example="30",
)
"""Waiting this long is worth one priority level (more than 0, at most 30 days)."""


log = logging.getLogger(__name__)

BATCH = 1000
"""Jobs read (and at most re-keyed) per transaction."""

LOCK_TIMEOUT = "2s"
"""How long a batch waits for a row another transaction holds before it starts over."""

RETRIES = 5
"""Attempts per batch that met a lock timeout or a deadlock."""


@dataclass(frozen=True)
class Rekeyed:
    """What one re-key did: jobs whose key changed, and transactions (batches) it took."""

    rekeyed: int = 0
    batches: int = 0


@dataclass(frozen=True)
class _Walk:
    """One status's walk: its batch query, where it starts, and the next cursor from a row."""

    status: str
    query: LiteralString
    start: Mapping[str, Any]
    cursor: Callable[[Mapping[str, Any]], dict[str, Any]]


_WALKS = (
    # Waiting and dead first: a waiting job becomes pending when its aggregate moves on,
    # a dead one when replayed; pending next; running last, since claims move pending
    # jobs there while the walk goes (a running job that goes back to pending after the
    # running walk passed it keeps its key: run the re-key again to finish it).
    _Walk(
        "waiting",
        "aging_rekey_waiting",
        {"after_tenant": "", "after_aggregate": "", "after_seq": -(2**63)},
        lambda r: {k: r[k] for k in ("after_tenant", "after_aggregate", "after_seq")},
    ),
    _Walk(
        "dead",
        "aging_rekey_dead",
        {"after_finished": datetime.min.replace(tzinfo=UTC), "after_id": 0},
        lambda r: {"after_finished": r["after_finished"], "after_id": r["id"]},
    ),
    _Walk(
        "pending",
        "aging_rekey_pending",
        {"after_key": -math.inf, "after_id": 0},
        lambda r: {"after_key": r["after_key"], "after_id": r["id"]},
    ),
    _Walk("running", "aging_rekey_running", {"after_id": 0}, lambda r: {"after_id": r["id"]}),
)


def aging_rekey(conn: psycopg.Connection, queue: str, *, batch: int = BATCH) -> Rekeyed:
    """Give every claimable job of ``queue`` the aging key of the queue's interval now.

    ``conn`` must not be in a transaction: each batch commits on its own.
    """
    if not idle(conn):
        raise RuntimeError("aging_rekey commits batch by batch: call it outside a transaction")
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    rekeyed = batches = 0
    for walk in _WALKS:
        cursor: dict[str, Any] = dict(walk.start)
        while True:
            read, moved, last = _batch(conn, queue, walk, cursor, batch)
            batches += 1
            rekeyed += moved
            if last is None or read < batch:
                break
            cursor = walk.cursor(last)
    if rekeyed:
        log.info("queue %s: re-keyed %d jobs for its aging interval in %d batches", queue, rekeyed, batches)
    return Rekeyed(rekeyed, batches)


def _batch(
    conn: psycopg.Connection, queue: str, walk: _Walk, cursor: Mapping[str, Any], batch: int
) -> tuple[int, int, dict[str, Any] | None]:
    """One transaction: read the next batch past ``cursor`` and re-key it; returns the
    rows read, the rows re-keyed and the last row read."""
    with operation("aging_rekey"):
        for attempt in range(1, RETRIES + 1):
            try:
                with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
                    cur.execute("SELECT set_config('lock_timeout', %s, true)", (LOCK_TIMEOUT,))
                    params = {"queue": queue, "batch": batch, **cursor}
                    rows = cur.execute(STATEMENTS[walk.query], params).fetchall()
                    if not rows:
                        return 0, 0, None
                    cur.execute(
                        STATEMENTS["aging_rekey_update"],
                        {"queue": queue, "status": walk.status, "ids": [r["id"] for r in rows]},
                    )
                    return len(rows), cur.rowcount, rows[-1]
            except (errors.LockNotAvailable, errors.DeadlockDetected):
                if attempt == RETRIES:
                    raise
                time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")
