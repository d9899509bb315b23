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

# Lock (creating them) the aggregates a held batch touches; a new aggregate starts at the
# lowest sequence number of its first batch. Returns next_seq. Refused for a tenant
# outside the producer's grants (fairsched.aggregates_lock, migrations/serial).
_LOCK = """SELECT tenant, aggregate_key, next_seq
  FROM fairsched.aggregates_lock(%(queue)s, %(tenants)s::text[], %(keys)s::text[], %(seqs)s::bigint[])"""

# Sequence numbers of a held batch that already exist in their aggregate.
_SEQ_TAKEN = """SELECT j.tenant, j.aggregate_key, j.aggregate_seq
  FROM unnest(%(tenants)s::text[], %(keys)s::text[], %(seqs)s::bigint[])
       AS t(tenant, aggregate_key, aggregate_seq)
  JOIN fairsched.jobs j
    ON j.serial AND j.queue_name = %(queue)s AND j.tenant = t.tenant
   AND j.aggregate_key = t.aggregate_key AND j.aggregate_seq = t.aggregate_seq"""

# Held jobs left running for good: advance their aggregate past them, or (poison mode
# block) let a dead one hold it (fairsched.aggregates_finish, migrations/serial).
_FINISH = "SELECT queue_name, tenant, aggregate_key FROM fairsched.aggregates_finish(%(ids)s::bigint[])"

# Promote the next job of each given aggregate that has no job pending or running and is
# not blocked (fairsched.aggregates_advance, migrations/serial).
_ADVANCE = """SELECT id, queue_name, tenant, available_at
  FROM fairsched.aggregates_advance(%(queues)s::text[], %(tenants)s::text[], %(keys)s::text[])"""


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
        """Lock the aggregates of a batch and refuse sequence numbers that ran or exist."""
        held = [j for j in jobs if j.aggregate_key is not None]
        seen: set[tuple[str, str, int | None]] = set()
        for job in held:
            key = (job.tenant, job.aggregate_key or "", job.aggregate_seq)
            if key in seen:
                raise InvalidInput(
                    f"aggregate {job.aggregate_key!r} of tenant {job.tenant!r}: "
                    f"sequence number {job.aggregate_seq} appears twice in one batch"
                )
            seen.add(key)
        arrays = {
            "queue": queue,
            "tenants": [j.tenant for j in held],
            "keys": [j.aggregate_key for j in held],
            "seqs": [j.aggregate_seq for j in held],
        }
        with operation("aggregates_lock"):
            rows = conn.execute(_LOCK, arrays).fetchall()
            next_seq = {(tenant, key): seq for tenant, key, seq in rows}
            for job in held:
                expected = next_seq[(job.tenant, job.aggregate_key or "")]
                if job.aggregate_seq is not None and job.aggregate_seq < expected:
                    raise InvalidInput(
                        f"aggregate {job.aggregate_key!r} of tenant {job.tenant!r} is already past "
                        f"sequence number {job.aggregate_seq} (next is {expected}): it ran or was skipped"
                    )
            taken = conn.execute(_SEQ_TAKEN, arrays).fetchall()
        if taken:
            tenant, key, seq = taken[0]
            raise InvalidInput(
                f"aggregate {key!r} of tenant {tenant!r} already has a job with sequence number {seq}"
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
        the next job of those aggregates and of aggregates that got waiting jobs."""
        held = [job for job in jobs if job.aggregate_key is not None]
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
