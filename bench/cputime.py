"""CPU time of processes on this machine, read from /proc: the bench's worker processes,
and the PostgreSQL backends serving a database when the server runs here too.

On a machine where the workers and the server share the cores, the CPU each side
spends per job decides the throughput; ``fairsched bench`` reports it next to the
rates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import psycopg

from bench.sql import QUERIES

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds a process has used; ``None`` when it is gone or unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def local_backends(conn: psycopg.Connection) -> list[int]:
    """Pids of the other backends connected to ``conn``'s database, when they run on this
    machine: a backend's process title names its database. Empty for a remote server."""
    database = conn.info.dbname
    rows = conn.execute(QUERIES["bench_backends"]).fetchall()
    return [pid for (pid,) in rows if is_backend_of(pid, database)]


def is_backend_of(pid: int, database: str) -> bool:
    """Whether local process ``pid`` is a PostgreSQL backend connected to ``database``."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return title.startswith("postgres:") and f" {database} " in title


class CpuMeter:
    """CPU seconds a set of processes used since the meter started. Processes that
    appear later count from zero; processes gone by the reading are left out."""

    def __init__(self, pids: Iterable[int]) -> None:
        self._start = {pid: cpu for pid in pids if (cpu := process_cpu_seconds(pid)) is not None}

    def used(self, pids: Iterable[int]) -> float:
        """CPU seconds ``pids`` used since the start."""
        total = 0.0
        for pid in set(pids):
            now = process_cpu_seconds(pid)
            if now is not None:
                total += now - self._start.get(pid, 0.0)
        return total
