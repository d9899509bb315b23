"""serial: one job at a time per ``(queue, tenant, aggregate_key)``, in increasing sequence.

Only an aggregate's next job is ``pending``; the rest wait as ``waiting``,
outside every claim index, and are promoted when their predecessor finishes.
Gap mode ``strict`` waits for the missing number, ``lowest`` runs the lowest
present; poison mode ``block`` keeps a dead job at the head, ``skip`` passes it.

Its state is a head per aggregate (``fairsched.aggregates``: the next sequence number,
the dead job blocking it, since when a gap is waited for). It holds the jobs of an
aggregate back at enqueue (:meth:`Serial.hold` locks and checks their aggregates,
:meth:`Serial.settle` promotes the heads), and settles after every transition: a job
that finished for good moves its aggregate past it (or, dead in mode ``block``, holds
it), and the next job is promoted.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Literal

import psycopg

from fairsched.db.connection import operation
from fairsched.errors import InvalidInput
from fairsched.policy import BasePolicy, EnqueueColumn, JobState, Pending, Setting
from fairsched_policies.queuecolumns import queue_column

if TYPE_CHECKING:
    from fairsched.engine.enqueue import JobSpec

# Lock (creating them) the aggregates a held batch touches; a new aggregate starts at 1
# (0 when its first batch holds 0) in gap mode strict, at the lowest number of its first
# batch in mode lowest. Returns next_seq. Refused for a tenant outside the producer's
# grants (fairsched.aggregates_lock, migrations/serial).
_LOCK = """SELECT tenant, aggregate_key, next_seq
  FROM fairsched.aggregates_lock(%(queue)s, %(tenants)s::text[], %(keys)s::text[], %(seqs)s::bigint[])"""

# Jobs of a held batch (by position, from 1) whose idempotency key names a job of the queue
# (an idempotent retry: the insert returns that job), or whose sequence number is taken.
_EXISTING = """SELECT t.ord, r.retried, r.taken
  FROM unnest(%(tenants)s::text[], %(keys)s::text[], %(seqs)s::bigint[], %(idempotency_keys)s::text[])
       WITH ORDINALITY AS t(tenant, aggregate_key, aggregate_seq, idempotency_key, ord)
 CROSS JOIN LATERAL (
       SELECT EXISTS (SELECT 1 FROM fairsched.jobs k
                       WHERE k.queue_name = %(queue)s AND k.tenant = t.tenant
                         AND k.idempotency_key = t.idempotency_key) AS retried,
              EXISTS (SELECT 1 FROM fairsched.jobs j
                       WHERE j.serial AND j.queue_name = %(queue)s AND j.tenant = t.tenant
                         AND j.aggregate_key = t.aggregate_key
                         AND j.aggregate_seq = t.aggregate_seq) AS taken) AS r
 WHERE r.retried OR r.taken"""

# Held jobs left running for good: advance their aggregate past them, or (poison mode
# block) let a dead one hold it (fairsched.aggregates_finish, migrations/serial).
_FINISH = "SELECT queue_name, tenant, aggregate_key FROM fairsched.aggregates_finish(%(ids)s::bigint[])"

# Promote the next job of each given aggregate that has no job pending or running and is
# not blocked (fairsched.aggregates_advance, migrations/serial).
_ADVANCE = """SELECT id, queue_name, tenant, available_at
  FROM fairsched.aggregates_advance(%(queues)s::text[], %(tenants)s::text[], %(keys)s::text[])"""


# Replayed jobs (pending again, not from running) that their aggregate passed over when
# they died (poison mode skip): they left its order (migrations/serial/003).
_PASSED = """SELECT j.id, j.tenant, j.aggregate_key, j.aggregate_seq
  FROM fairsched.jobs j
  JOIN fairsched.aggregates a
    ON a.queue_name = j.queue_name AND a.tenant = j.tenant AND a.aggregate_key = j.aggregate_key
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'pending' AND NOT j.serial
   AND a.next_seq > j.aggregate_seq
 ORDER BY j.id
 LIMIT 1"""

_STRICT_START = "a strict aggregate starts at 1 unless its first batch holds 0"

HELD = EnqueueColumn("serial", "i.aggregate_key IS NOT NULL")
"""Jobs of an aggregate are marked held: this policy orders them (``jobs.serial``)."""

FINISHED = frozenset({"succeeded", "dead", "discarded", "cancelled"})
"""The statuses a job does not leave again by itself."""


class Serial(BasePolicy):
    """Per-aggregate order: held jobs, and a head per aggregate."""

    name = "serial"
    holds = True

    def migrations(self) -> Traversable:
        return files("fairsched_policies") / "migrations" / "serial"

    def enqueue_columns(self) -> Sequence[EnqueueColumn]:
        return (HELD,)

    def hold(self, conn: psycopg.Connection, queue: str, jobs: Sequence[JobSpec]) -> None:
        """Lock the aggregates of a batch and refuse sequence numbers that ran or exist.

        Idempotent retries are left to the insert, which returns the job their key names
        whatever its state, aggregate or sequence number: a job whose key names a job of
        the queue, or an earlier job of the batch, is neither locked nor checked. Keys are
        looked for again once the aggregates are locked, for retries that raced their first.
        """
        held = _first_of_their_keys(jobs)
        if any(j.idempotency_key is not None for j in held):
            existing = _existing(conn, queue, held)
            held = [j for j, (retried, _taken) in zip(held, existing, strict=True) if not retried]
        seen: set[tuple[str, str, int | None]] = set()
        for job in held:
            key = (job.tenant, job.aggregate_key or "", job.aggregate_seq)
            if key in seen:
                raise InvalidInput(
                    f"aggregate {job.aggregate_key!r} of tenant {job.tenant!r}: "
                    f"sequence number {job.aggregate_seq} appears twice in one batch"
                )
            seen.add(key)
        if not held:
            return
        with operation("aggregates_lock"):
            rows = conn.execute(_LOCK, _arrays(queue, held)).fetchall()
            next_seq = {(tenant, key): seq for tenant, key, seq in rows}
            for job, (retried, taken) in zip(held, _existing(conn, queue, held), strict=True):
                seq = job.aggregate_seq or 0
                expected = next_seq[(job.tenant, job.aggregate_key or "")]
                if retried:
                    continue
                if seq < expected:
                    start = f" ({_STRICT_START})" if seq == 0 else ""
                    raise InvalidInput(
                        f"aggregate {job.aggregate_key!r} of tenant {job.tenant!r} is already past "
                        f"sequence number {seq} (next is {expected}): it ran or was skipped{start}"
                    )
                if taken:
                    raise InvalidInput(
                        f"aggregate {job.aggregate_key!r} of tenant {job.tenant!r} "
                        f"already has a job with sequence number {seq}"
                    )

    def settles(self, *, held: bool, tenant_order_settled: bool) -> bool:
        return held

    def settle(
        self,
        conn: psycopg.Connection,
        queue: str,
        jobs: Sequence[JobState],
        *,
        left_running: bool,
        tenant_order_settled: bool,
    ) -> Sequence[Pending]:
        """Move the aggregates of held jobs that finished for good past them, then promote
        the next job of those aggregates and of aggregates that got waiting jobs. A replayed
        job its aggregate passed over is refused: it would run out of order."""
        held = [job for job in jobs if job.aggregate_key is not None]
        replayed = [job.id for job in held if job.status == "pending" and not left_running]
        if replayed:
            _refuse_passed(conn, replayed)
        # Jobs of an aggregate inserted on a stack without this policy were not held:
        # aggregates_finish passes them over, and only held jobs wait.
        finished = [job.id for job in held if job.status in FINISHED]
        keys: set[tuple[str, str, str]] = set()
        if finished:
            with operation("aggregates_finish"):
                keys.update((r[0], r[1], r[2]) for r in conn.execute(_FINISH, {"ids": finished}))
        keys.update(
            (queue, j.tenant, j.aggregate_key) for j in held if j.status == "waiting" and j.aggregate_key
        )
        if not keys:
            return ()
        ordered = sorted(keys)
        with operation("aggregates_advance"):
            rows = conn.execute(
                _ADVANCE,
                {
                    "queues": [k[0] for k in ordered],
                    "tenants": [k[1] for k in ordered],
                    "keys": [k[2] for k in ordered],
                },
            ).fetchall()
        return [(tenant, due) for _id, _queue, tenant, due in rows]

    def settings(self) -> tuple[Setting, Setting]:
        return (GAP, POISON)


GAP = queue_column("serial_gap", Literal["strict", "lowest"], default="strict", example="lowest")
"""``strict`` waits for a missing sequence number, ``lowest`` runs the lowest present."""

POISON = queue_column("serial_poison", Literal["block", "skip"], default="block", example="skip")
"""``block`` keeps a dead job at its aggregate's head, ``skip`` passes it."""


def _first_of_their_keys(jobs: Sequence[JobSpec]) -> list[JobSpec]:
    """The jobs of an aggregate in a batch, but those whose idempotency key an earlier job
    of the batch has (the insert returns that one)."""
    keys: set[tuple[str, str]] = set()
    first: list[JobSpec] = []
    for job in jobs:
        repeated = job.idempotency_key is not None and (job.tenant, job.idempotency_key) in keys
        if job.idempotency_key is not None:
            keys.add((job.tenant, job.idempotency_key))
        if job.aggregate_key is not None and not repeated:
            first.append(job)
    return first


def _arrays(queue: str, jobs: Sequence[JobSpec]) -> dict[str, object]:
    return {
        "queue": queue,
        "tenants": [j.tenant for j in jobs],
        "keys": [j.aggregate_key for j in jobs],
        "seqs": [j.aggregate_seq for j in jobs],
        "idempotency_keys": [j.idempotency_key for j in jobs],
    }


def _existing(conn: psycopg.Connection, queue: str, jobs: Sequence[JobSpec]) -> list[tuple[bool, bool]]:
    """For each of ``jobs``: whether its idempotency key names a job of the queue, and
    whether its sequence number is taken."""
    with operation("aggregates_existing"):
        rows = conn.execute(_EXISTING, _arrays(queue, jobs)).fetchall()
    found = {ord_: (retried, taken) for ord_, retried, taken in rows}
    return [found.get(i, (False, False)) for i in range(1, len(jobs) + 1)]


def _refuse_passed(conn: psycopg.Connection, ids: Sequence[int]) -> None:
    """Refuse the replay of a dead job its aggregate passed over (poison mode skip)."""
    with operation("aggregates_passed"):
        row = conn.execute(_PASSED, {"ids": list(ids)}).fetchone()
    if row is not None:
        job_id, tenant, key, seq = row
        raise InvalidInput(
            f"job {job_id} was passed over by aggregate {key!r} of tenant {tenant!r}, which has moved on "
            f"past sequence number {seq}: replaying it would run it out of order, so enqueue its work "
            "again with a new sequence number, or discard it"
        )
