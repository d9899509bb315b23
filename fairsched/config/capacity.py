"""Capacity across queues: how a worker's slots are split between the queues it serves.

A **split** gives each queue an entitlement. Static (``--queue emails=8``):
each queue has its own slots and never lends them. Weighted (``--concurrency
16 --queue emails --queue reports`` with ``[queues.<name>] weight``): queue
``q`` is entitled to ``total * weight_q / sum(weights)`` slots, rounded by largest
remainder, at least 1 each.

The rule of a weighted split (``docs/capacity.md``), applied at every claim:

- a queue may always claim up to its entitlement, as far as slots are free;
- a queue with no claimable work lends its idle slots: a queue with work may
  claim beyond its entitlement the free slots that no other queue with work
  is owed;
- lent slots return as soon as the owner needs them: while the owner has
  work, borrowers claim nothing beyond their entitlement, so each slot a
  borrowed job frees goes to the owner at its next claim. Running jobs are
  never preempted;
- the running jobs of all queues never exceed the total.

A queue *has work* from the moment its claimer wants to claim (woken by a
notification, the poll, or a claim that leased jobs) until its claimer finds
none left: a claim comes back empty (under a backlog, twice in a row). Nothing
starves: a queue with work gets its entitlement back as jobs of over-entitled
queues finish.

:func:`entitlements` and :func:`grant` are the rule; :class:`Slots` is the
thread-safe ledger a worker's claimers share.

>>> entitlements(16, {"emails": 3, "reports": 1})
{'emails': 12, 'reports': 4}
>>> grant("reports", total=8, entitled={"emails": 6, "reports": 2},
...       held={"emails": 0, "reports": 0}, wanting=set())
8
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping, Set
from dataclasses import dataclass

from fairsched.engine.enqueue import check_queue_name
from fairsched.errors import InvalidInput

MAX_SLOTS = 1000
"""Most slots one worker process runs."""


def entitlements(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Each queue's share of ``total`` slots by weight: largest remainder, at least 1 each.

    Ties in the remainders go to the queue named first. Raises
    :class:`InvalidInput` when ``total`` is smaller than the number of queues or
    a weight is not positive.
    """
    if not weights:
        raise InvalidInput("a split needs at least one queue")
    if any(not (w > 0 and math.isfinite(w)) for w in weights.values()):
        raise InvalidInput(f"queue weights must be positive numbers, got {dict(weights)}")
    if total < len(weights):
        raise InvalidInput(f"{total} slots cannot give each of {len(weights)} queues one")
    names = list(weights)
    whole = sum(weights.values())
    quota = {name: total * weights[name] / whole for name in names}
    shares = {name: math.floor(quota[name]) for name in names}
    by_remainder = sorted(names, key=lambda n: (-(quota[n] - shares[n]), names.index(n)))
    for name in by_remainder[: total - sum(shares.values())]:
        shares[name] += 1
    for name in names:
        if shares[name] == 0:
            donor = max((n for n in names if shares[n] > 1), key=lambda n: (shares[n] - quota[n], shares[n]))
            shares[donor] -= 1
            shares[name] = 1
    return shares


def grant(
    queue: str,
    *,
    total: int,
    entitled: Mapping[str, int],
    held: Mapping[str, int],
    wanting: Set[str],
    lend: bool = True,
) -> int:
    """How many slots ``queue`` may claim now.

    ``held`` counts each queue's running jobs plus its claim in flight;
    ``wanting`` names the queues that have work. Without ``lend`` (a static
    split) a queue gets its unused entitlement and nothing more.
    """
    free = total - sum(held.values())
    own = max(0, entitled[queue] - held[queue])
    if not lend:
        return max(0, min(free, own))
    owed = sum(max(0, entitled[q] - held[q]) for q in wanting if q != queue)
    return max(0, min(free, max(own, free - owed)))


@dataclass(frozen=True)
class Split(Mapping[str, int]):
    """A worker's queues and their entitlements (as a mapping: queue → entitled slots)."""

    total: int
    entitled: Mapping[str, int]
    lend: bool

    @classmethod
    def static(cls, slots: Mapping[str, int]) -> Split:
        """Fixed slots per queue, never lent."""
        return cls(sum(slots.values()), dict(slots), lend=False)

    @classmethod
    def weighted(cls, total: int, weights: Mapping[str, float]) -> Split:
        """``total`` slots shared by weight, idle ones lent."""
        if not 1 <= total <= MAX_SLOTS:
            raise InvalidInput(f"--concurrency must be from 1 to {MAX_SLOTS}, got {total}")
        return cls(total, entitlements(total, weights), lend=True)

    @classmethod
    def of(cls, queues: Mapping[str, int]) -> Split:
        """``queues`` itself when it is a split, else a static split of it."""
        return queues if isinstance(queues, Split) else cls.static(queues)

    def most(self, queue: str) -> int:
        """The most jobs ``queue`` can ever run at once (the total when slots are lent)."""
        return self.total if self.lend else self.entitled[queue]

    def __getitem__(self, queue: str) -> int:
        return self.entitled[queue]

    def __iter__(self) -> Iterator[str]:
        return iter(self.entitled)

    def __len__(self) -> int:
        return len(self.entitled)


class Slots:
    """The slots of one worker, shared by its queues' claimers (thread-safe).

    A claimer calls :meth:`take` before a claim, :meth:`claimed` after it and
    :meth:`finished` when a job leaves its slot. A claimer refused a slot is
    woken through ``wake(queue)`` when slots come free.
    """

    def __init__(self, split: Split, wake: Callable[[str], None]) -> None:
        self.split = split
        self._wake = wake
        self._lock = threading.Lock()
        self._held = dict.fromkeys(split, 0)
        self._wanting: set[str] = set()
        self._waiting: set[str] = set()

    def take(self, queue: str, most: int) -> int:
        """Reserve up to ``most`` slots for a claim of ``queue`` (which has work); may be 0."""
        with self._lock:
            self._wanting.add(queue)
            n = min(most, self._grant(queue))
            if n > 0:
                self._held[queue] += n
            else:
                self._waiting.add(queue)
            return n

    def claimed(self, queue: str, taken: int, got: int, *, more: bool = False) -> None:
        """A claim that reserved ``taken`` slots leased ``got`` jobs; the rest come back.

        A short claim means the queue ran out of claimable work (its idle slots
        become lendable) unless its claimer expects ``more``: a tenant-first claim
        comes back short while other tenants still have plenty, and the claimer
        claims again at once.
        """
        with self._lock:
            self._held[queue] -= taken - got
            if got < taken and not more:
                self._wanting.discard(queue)
            woken = self._woken() if got < taken else []
        self._notify(woken)

    def finished(self, queue: str) -> None:
        """A job of ``queue`` left its slot."""
        with self._lock:
            self._held[queue] -= 1
            woken = self._woken() if self._waiting else []
        self._notify(woken)

    def held(self) -> dict[str, int]:
        """Slots held per queue now (running jobs and claims in flight)."""
        with self._lock:
            return dict(self._held)

    def _grant(self, queue: str) -> int:
        split = self.split
        return grant(
            queue,
            total=split.total,
            entitled=split.entitled,
            held=self._held,
            wanting=self._wanting,
            lend=split.lend,
        )

    def _woken(self) -> list[str]:
        woken = sorted(self._waiting)
        self._waiting.clear()
        return woken

    def _notify(self, queues: list[str]) -> None:
        for queue in queues:
            self._wake(queue)


def parse_weighted(items: list[str], total: int, weights: Mapping[str, float]) -> Split:
    """Bare queue names given with ``--concurrency total``, weighted by ``weights``
    (queues not listed weigh 1)."""
    names: list[str] = []
    for item in items:
        if "=" in item:
            raise InvalidInput(
                f"--queue {item!r}: with --concurrency give bare queue names (weights come from "
                "[queues.<name>] weight); without it, queue=slots"
            )
        check_queue_name(item)
        if item in names:
            raise InvalidInput(f"--queue {item!r} given twice")
        names.append(item)
    if not names:
        raise InvalidInput("give at least one --queue")
    return Split.weighted(total, {name: weights.get(name, 1.0) for name in names})
