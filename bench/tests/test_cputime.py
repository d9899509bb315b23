"""CPU time of local processes: the bench reads its workers' and the server backends'."""

from __future__ import annotations

import os

import psycopg

from bench.cputime import CpuMeter, is_backend_of, local_backends, process_cpu_seconds


def test_a_backend_is_found_by_its_database_and_its_cpu_is_counted(fresh_db: str) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as watch, psycopg.connect(fresh_db) as busy:
        pid = busy.info.backend_pid
        database = busy.info.dbname
        assert is_backend_of(pid, database)
        assert not is_backend_of(pid, database + "_other")
        assert not is_backend_of(os.getpid(), database), "this test process is no backend"
        assert local_backends(watch) == [pid], "the other backend of the database, not the watcher's own"

        meter = CpuMeter([pid])
        busy.execute("SELECT count(*) FROM generate_series(1, 3000000) AS g WHERE g % 7 = 0").fetchone()
        assert meter.used([pid]) > 0, "the backend's CPU for three million rows shows in /proc"
        assert meter.used([]) == 0


def test_processes_that_start_later_count_from_zero_and_gone_ones_are_left_out() -> None:
    own, gone = os.getpid(), 2**22 + 1  # above Linux's largest pid_max: no such process
    meter, later = CpuMeter([own, gone]), CpuMeter([])
    assert process_cpu_seconds(gone) is None
    so_far = process_cpu_seconds(own)
    assert so_far is not None and so_far > 0
    sum(i * i for i in range(2_000_000))
    assert meter.used([own]) > 0
    assert meter.used([gone]) == 0
    assert later.used([own]) >= so_far, "a process unknown at the start counts all its CPU"
