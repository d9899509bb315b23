"""Retention: finished jobs, dead jobs and the attempt history leave the tables.

Each queue keeps succeeded and discarded jobs for ``finished_retention_seconds``,
dead jobs for ``dead_retention_seconds`` and attempt records and job events for
``history_retention_seconds`` (the history of a job still kept stays with it). The
database function ``fairsched.jobs_prune`` (``migrations/002_retention.sql``)
removes one batch of one kind per call, in its own short transaction: index range
scans in database time, candidates locked ``FOR UPDATE SKIP LOCKED``, and a
transaction-level advisory lock so that one batch at a time runs across the
cluster. A prune that finds the lock taken stops at once and says so; whoever holds
it is doing the work. After large deletes a prune may also vacuum the jobs table
(:func:`jobs_vacuum`), when its role is allowed to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import check_queue_name
from fairsched.errors import DatabaseError, InvalidInput, UnknownQueue

KINDS = ("finished", "dead", "history")
"""What a prune removes, in the order it goes: jobs first, so their history may follow."""

BATCH = 1000
"""Rows per statement (and per transaction): short enough that no lock is held for long."""

MAX_BATCH = 10_000
MAX_BATCHES = 1000
"""Batches per queue and kind in one pass; what is left goes at the next pass."""


@dataclass(frozen=True)
class PruneResult:
    """What one pass removed (or, for a dry run, would remove) per queue and kind."""

    removed: dict[str, dict[str, int]]
    dry_run: bool = False
    skipped: bool = False
    """Another prune held the lock: this pass stopped early and left the rest to it."""
    failed: dict[str, str] = field(default_factory=dict)
    """Queues whose prune failed, with the error; the other queues were pruned."""

    @property
    def total(self) -> int:
        return sum(n for kinds in self.removed.values() for n in kinds.values())


def jobs_prune(
    conn: psycopg.Connection,
    *,
    queue: str | None = None,
    batch: int = BATCH,
    max_batches: int = MAX_BATCHES,
    dry_run: bool = False,
) -> PruneResult:
    """Prune every queue (or ``queue``) past its retention, ``batch`` rows per
    transaction, at most ``max_batches`` per queue and kind.

    ``dry_run`` deletes nothing and counts every row past retention now. A queue that
    fails is reported in :attr:`PruneResult.failed` and does not stop the others.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InvalidInput(f"prune batch must be a whole number from 1 to {MAX_BATCH}")
    if isinstance(max_batches, bool) or not isinstance(max_batches, int) or max_batches < 1:
        raise InvalidInput("max_batches must be a positive whole number")
    queues = _queues(conn, queue)
    removed: dict[str, dict[str, int]] = {}
    failed: dict[str, str] = {}
    for name in queues:
        counts = removed.setdefault(name, dict.fromkeys(KINDS, 0))
        try:
            for kind in KINDS:
                if dry_run:
                    counts[kind] = _count(conn, name, kind)
                    continue
                for _ in range(max_batches):
                    n = _batch(conn, name, kind, batch)
                    if n is None:
                        return PruneResult(removed, skipped=True, failed=failed)
                    counts[kind] += n
                    if n < batch:
                        break
        except DatabaseError as e:
            failed[name] = str(e)
    return PruneResult(removed, dry_run=dry_run, failed=failed)


def _queues(conn: psycopg.Connection, queue: str | None) -> list[str]:
    with operation("prune_queues"):
        names = [row[0] for row in conn.execute(QUERIES["prune_queues"]).fetchall()]
    if queue is None:
        return names
    check_queue_name(queue)
    if queue not in names:
        raise UnknownQueue(queue)
    return [queue]


def _batch(conn: psycopg.Connection, queue: str, kind: str, batch: int) -> int | None:
    """One batch in its own transaction; ``None`` when another prune holds the lock."""
    with conn.transaction(), operation("jobs_prune"):
        row = conn.execute(QUERIES["jobs_prune"], {"queue": queue, "kind": kind, "batch": batch}).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _count(conn: psycopg.Connection, queue: str, kind: str) -> int:
    with conn.transaction(), operation("jobs_prune_count"):
        row = conn.execute(QUERIES["jobs_prune_count"], {"queue": queue, "kind": kind}).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


VACUUM_MIN_ROWS = 10_000
VACUUM_SHARE = 0.2
"""A prune vacuums the jobs table once it deleted this share of the table's live rows
(and at least :data:`VACUUM_MIN_ROWS`) since the last vacuum."""


def jobs_vacuum(conn: psycopg.Connection, deleted: int) -> bool | None:
    """VACUUM the jobs table when ``deleted`` rows since the last vacuum are due one and
    this session may vacuum it: the space of deleted rows is reused only once a vacuum
    recorded it, and autovacuum visits a database at most every ``autovacuum_naptime``.

    Returns ``True`` when it vacuumed, ``False`` when not due, ``None`` when this role may
    not (autovacuum does it then). ``conn`` must be in autocommit mode.
    """
    with operation("jobs_vacuum_due"):
        row = conn.execute(QUERIES["jobs_vacuum_due"]).fetchone()
    live, allowed = row if row is not None else (0, False)
    if not allowed:
        return None
    if deleted < max(VACUUM_MIN_ROWS, VACUUM_SHARE * live):
        return False
    with operation("jobs_vacuum"):
        conn.execute(QUERIES["jobs_vacuum"])
    return True
