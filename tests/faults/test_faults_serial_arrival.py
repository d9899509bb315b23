"""Serial order whatever the arrival order: producers on their own connections enqueue the
jobs of a few aggregates in an order and batches hypothesis draws, while worker processes
claim in batches and one of them is killed (SIGKILL) in the middle of a job. Every
aggregate's jobs run in sequence order, each to success exactly once."""

from __future__ import annotations

import itertools
import signal
import threading
from pathlib import Path

import psycopg
from apps.probe import create_probe_tables
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from policies_support import declare
from worker_support import running_workers, wait_for, wait_listening

from fairsched import Client
from fairsched.engine.enqueue import JobSpec

AGGREGATES, SEQS, PRODUCERS = 3, 4, 3
PAYLOAD = {"record": True, "sleep": 0.15}
JOBS = [(a, s) for a in range(AGGREGATES) for s in range(1, SEQS + 1)]
_examples = itertools.count()

# The start of each job's successful attempt, in the order the starts were written.
_RUN_ORDER = """SELECT j.aggregate_key, j.aggregate_seq
  FROM fairsched.jobs j
  JOIN public.probe_events e ON e.job_id = j.id AND e.attempt = j.attempt_count AND e.event = 'start'
 WHERE j.queue_name = 'probe' AND j.aggregate_key LIKE %s
 ORDER BY e.id"""

# A job the worker of ``pid`` started and has not ended.
_MID_JOB = """SELECT 1 FROM public.probe_events s
 WHERE s.pid = %s AND s.event = 'start'
   AND NOT EXISTS (SELECT 1 FROM public.probe_events e
                    WHERE e.job_id = s.job_id AND e.attempt = s.attempt AND e.event = 'end')"""

_DONE = """SELECT count(*) FROM fairsched.jobs
 WHERE queue_name = 'probe' AND aggregate_key LIKE %s AND status = 'succeeded'"""

# Each job's status and how many of its attempts ran to their end.
_ENDS = """SELECT j.status, count(e.*)
  FROM fairsched.jobs j LEFT JOIN public.probe_events e ON e.job_id = j.id AND e.event = 'end'
 WHERE j.queue_name = 'probe' AND j.aggregate_key LIKE %s
 GROUP BY j.id"""


@st.composite
def arrivals(draw: st.DrawFn) -> list[list[tuple[int, int]]]:
    """The jobs in a drawn order, cut into drawn batches."""
    order = draw(st.permutations(JOBS))
    cuts = sorted(draw(st.sets(st.integers(1, len(order) - 1), max_size=6)))
    return [order[i:j] for i, j in itertools.pairwise([0, *cuts, len(order)])]


def _produce(
    dsn: str, client: Client, prefix: str, batches: list[list[tuple[int, int]]], errors: list[Exception]
) -> None:
    try:
        _enqueue(dsn, client, prefix, batches)
    except Exception as error:  # the test asserts there was none
        errors.append(error)


def _enqueue(dsn: str, client: Client, prefix: str, batches: list[list[tuple[int, int]]]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for batch in batches:
            specs = [
                JobSpec(
                    {"record": True, "sleep": 0.15},
                    f"t{a % 2}",
                    aggregate_key=f"{prefix}{a}",
                    aggregate_seq=s,
                )
                for a, s in batch
            ]
            client.enqueue_many("probe", specs, conn=conn)


@settings(
    max_examples=3,
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=arrivals())
def test_aggregates_run_in_order_whatever_the_arrival_order_through_a_kill(
    client: Client,
    fresh_db: str,
    db: psycopg.Connection,
    tmp_path: Path,
    batches: list[list[tuple[int, int]]],
) -> None:
    """The doomed worker takes the first heads in one batch and is killed in a job; a second
    worker recovers its leases and finishes."""
    example = next(_examples)
    prefix = f"e{example}-"
    stack = ["weighted", "aging", "serial"]
    declare(client, "probe", stack, serial_gap="strict", lease_seconds=1.0, max_attempts=5)
    create_probe_tables(db)
    logs = tmp_path / prefix
    logs.mkdir()
    with running_workers(fresh_db, logs) as workers:
        doomed = workers.start({"probe": 3})
        wait_listening(db, 1)  # the workers of earlier examples are gone
        errors: list[Exception] = []
        producers = [
            threading.Thread(target=_produce, args=(fresh_db, client, prefix, batches[p::PRODUCERS], errors))
            for p in range(PRODUCERS)
        ]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.join()
        assert errors == []
        wait_for(lambda: db.execute(_MID_JOB, (doomed.pid,)).fetchone(), "the doomed worker in a job")
        doomed.send(signal.SIGKILL)
        doomed.wait()
        workers.start({"probe": 3})
        wait_for(
            lambda: db.execute(_DONE, (prefix + "%",)).fetchone() == (len(JOBS),),
            "every job succeeded",
            timeout=40,
        )
    runs: dict[str, list[int]] = {}
    for key, seq in db.execute(_RUN_ORDER, (prefix + "%",)):
        runs.setdefault(key, []).append(seq)
    assert runs == {f"{prefix}{a}": list(range(1, SEQS + 1)) for a in range(AGGREGATES)}
    assert set(db.execute(_ENDS, (prefix + "%",))) == {("succeeded", 1)}
