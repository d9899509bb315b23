"""Paced claims: under a backlog of jobs that run longer than a claim window, a queue's
claimer starts jobs at the pace its slots free, not in bunches.

Slots that start together free together a run time later. A claimer that claims every
free slot at once keeps them in step for good, so work that arrives between two bunches
(a small tenant's job beside a flood) waits for the next one, up to a whole run time,
whatever its tenant's share. Paced, the starts spread over a run time, and a job that
arrives waits about a claim window for a slot.

The pace is a little over ``slots / run time`` starts per second, from a running average
of the queue's run times; claims come at least a window apart, and up to two windows' worth of
starts is saved for claims that came back short. Jobs that run no longer than a window
are never paced: a window frees all their slots.
"""

from __future__ import annotations

import math

RUN_SECONDS_WEIGHT = 0.05
"""Weight of each finished job's run time in the running average."""
PACE_MARGIN = 1.25
"""Starts per freed slot: a slot also waits for the claim that refills it, and a claim can
come back short, so a pace of exactly one start per slot freed falls behind."""
BURST_WINDOWS = 2
"""How many windows' worth of starts a claim may take after claims that came back short."""


class Pacer:
    """One queue's pace (not thread-safe: its runner calls it under its lock)."""

    def __init__(self, slots: int, window: float) -> None:
        self.slots = slots
        self.window = window
        self.run_seconds: float | None = None
        self._allowance = 0.0
        self._at = 0.0

    def finished(self, seconds: float) -> None:
        """A job ran ``seconds``."""
        if self.run_seconds is None:
            self.run_seconds = seconds
        else:
            self.run_seconds += (seconds - self.run_seconds) * RUN_SECONDS_WEIGHT

    @property
    def paced(self) -> bool:
        """Whether claims under a backlog are paced: the jobs run longer than a window."""
        return self.run_seconds is not None and self.run_seconds > self.window

    @property
    def rate(self) -> float:
        """Starts per second at the pace the slots free (paced queues only)."""
        assert self.run_seconds, "no job has finished yet"
        return PACE_MARGIN * self.slots / self.run_seconds

    def pause(self, now: float) -> float:
        """How long a paced claim waits at ``now`` (monotonic seconds): until a window
        has passed since the last one and a start is due."""
        due = self._at + max(self.window, (1.0 - self._allowance) / self.rate)
        return max(0.0, due - now)

    def allowance(self, now: float) -> int:
        """How many jobs a paced claim at ``now`` may start: the pace's starts since the
        last claim plus what short claims left, at least one."""
        burst = max(1.0, BURST_WINDOWS * self.rate * self.window)
        self._allowance = min(self._allowance + (now - self._at) * self.rate, burst)
        self._at = now
        return max(1, math.floor(self._allowance))

    def started(self, jobs: int) -> None:
        """A claim started ``jobs``."""
        self._allowance = max(0.0, self._allowance - jobs)
