"""A probe of the server's commit latency for ``fairsched bench``: one tiny durable write
committed every few milliseconds on a connection of its own, timed from the client.

While the server's WAL flush stalls (a slow disk, a busy volume), every commit waits:
the enqueue that makes a job visible as much as the claim that starts it. The probe
records those stalls on the database's clock, so that a bench window's waits can be
set beside the commits they overlapped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from bench.sql import QUERIES

PROBE_INTERVAL = 0.02
"""Seconds between one probe commit's return and the next one's start: a stall longer
than this is met by at least one probe commit."""
STALL_SECONDS = 0.02
"""A probe commit that took this long or longer is a stall (an idle commit takes well
under a millisecond)."""


@dataclass(frozen=True)
class Commit:
    """One probe commit: when it was sent (epoch seconds, on the database's clock) and
    how long it took to return."""

    at: float
    seconds: float

    @property
    def end(self) -> float:
        return self.at + self.seconds


def db_clock(conn: psycopg.Connection) -> float:
    """The database's clock, in epoch seconds: the jobs' timestamps and the probe's
    commits are read on it."""
    ((now,),) = conn.execute(QUERIES["bench_clock"]).fetchall()
    return float(now)


@contextmanager
def commit_probe(dsn: str, interval: float = PROBE_INTERVAL) -> Iterator[list[Commit]]:
    """Commit one row update every ``interval`` seconds until the block ends; the list
    yielded fills with each :class:`Commit` as it returns. A probe that failed raises
    its error when the block ends, rather than leave its figures short."""
    commits: list[Commit] = []
    failed: list[psycopg.Error] = []
    stop = threading.Event()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(QUERIES["commit_probe_install"])
        sent = time.perf_counter()
        now = db_clock(conn)
        offset = now - (sent + time.perf_counter()) / 2  # perf_counter -> database clock

        def loop() -> None:
            while not stop.wait(interval):
                sent = time.perf_counter()
                try:
                    conn.execute(QUERIES["commit_probe"])
                except psycopg.Error as error:
                    failed.append(error)
                    return
                commits.append(Commit(sent + offset, time.perf_counter() - sent))

        thread = threading.Thread(target=loop, name="commit-probe", daemon=True)
        thread.start()
        try:
            yield commits
        finally:
            stop.set()
            thread.join()
        if failed:
            raise failed[0]


def stalls(commits: Sequence[Commit], threshold: float = STALL_SECONDS) -> list[Commit]:
    """The probe commits that took ``threshold`` seconds or longer."""
    return [c for c in commits if c.seconds >= threshold]


def overlapping(span: tuple[float, float], commits: Sequence[Commit]) -> bool:
    """Whether the interval ``span`` (epoch seconds, database clock) overlaps any of
    ``commits``."""
    start, end = span
    return any(c.at <= end and start <= c.end for c in commits)
