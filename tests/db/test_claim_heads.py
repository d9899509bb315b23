"""Claim heads: claims start their scans at the heads, and no claimable job is ever hidden.

The invariant (``migrations/001_baseline.sql``, claim heads): no pending job has a key below its
queue's heads in either built-in job order, and no active tenant a pass below the
queue's pass floor. It is checked here after every step of random sequences of
enqueues, claims, retries, releases and refreshes, and at the two races a refresh can
meet: a transaction making a job pending that holds its lock first, and one that
waits for a refresh holding it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairsched import Client, QueueSettings
from fairsched.db.sql import QUERIES
from fairsched.engine.claim import jobs_claim

QUEUE_NAMES = (f"h{n}" for n in itertools.count())

STACKS = (("fifo",), ("aging",), ("weighted", "aging"), ("weighted",))

INVARIANT = """
SELECT h.queue_name,
       (SELECT count(*) FROM fairsched.jobs AS j
         WHERE j.queue_name = h.queue_name AND j.status = 'pending'
           AND (- j.priority, j.available_at, j.id) < (h.order_rank, h.order_available_at, h.order_id))
           AS below_fifo_head,
       (SELECT count(*) FROM fairsched.jobs AS j
         WHERE j.queue_name = h.queue_name AND j.status = 'pending'
           AND (j.aging_key, j.id) < (h.aging_key, h.aging_id)) AS below_aging_head,
       (SELECT count(*) FROM fairsched.tenant_shares AS t
         WHERE t.queue_name = h.queue_name AND t.active AND t.pass < f.pass) AS below_pass_floor
  FROM fairsched.claim_heads AS h JOIN fairsched.pass_floors AS f USING (queue_name)
 WHERE h.queue_name = %(queue)s
"""


def assert_invariant(db: psycopg.Connection, queue: str) -> None:
    row = db.execute(INVARIANT, {"queue": queue}).fetchone()
    assert row == (queue, 0, 0, 0), row


def first_claimable(db: psycopg.Connection, queue: str, order: str) -> int | None:
    """The job a claim without heads would take first (job-first stacks)."""
    queries = {
        "fifo": "SELECT id FROM fairsched.jobs WHERE queue_name = %(queue)s AND status = 'pending' "
        "AND available_at <= now() ORDER BY - priority, available_at, id LIMIT 1",
        "aging": "SELECT id FROM fairsched.jobs WHERE queue_name = %(queue)s AND status = 'pending' "
        "AND available_at <= now() ORDER BY aging_key, id LIMIT 1",
    }
    row = db.execute(queries[order], {"queue": queue}).fetchone()
    return None if row is None else int(row[0])


step = st.one_of(
    st.tuples(st.just("enqueue"), st.integers(0, 3), st.integers(-3, 3)),
    st.tuples(st.just("claim"), st.integers(1, 4), st.just(0)),
    st.tuples(st.just("retry"), st.integers(0, 9), st.just(0)),
    st.tuples(st.just("release"), st.integers(0, 9), st.just(0)),
    st.tuples(st.just("refresh"), st.just(0), st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stack=st.sampled_from(STACKS), steps=st.lists(step, min_size=1, max_size=30))
def test_random_transitions_never_leave_a_job_below_the_heads(
    fresh_db: str, db: psycopg.Connection, stack: tuple[str, ...], steps: list[tuple[str, int, int]]
) -> None:
    queue = next(QUEUE_NAMES)
    order = "aging" if "aging" in stack else "fifo"
    with Client(fresh_db) as client:
        client.declare_queue(
            queue,
            QueueSettings(policies=list(stack), backoff_base_seconds=0, backoff_max_seconds=0, notify=False),
        )
        held = []
        for op, a, b in steps:
            if op == "enqueue":
                client.enqueue(queue, {}, tenant=f"t{a}", priority=b)
            elif op == "claim":
                expected = first_claimable(db, queue, order)
                leases = client.claim(queue, owner="w", limit=a)
                if "weighted" not in stack:
                    assert (leases[0].id if leases else None) == expected
                held += leases
            elif op in ("retry", "release") and held:
                lease = held.pop(a % len(held))
                if op == "retry":
                    assert client.fail(lease, RuntimeError("again"), kind="retryable")
                else:
                    assert client.release(lease)
            elif op == "refresh":
                client.heads_refresh()
            assert_invariant(db, queue)
        # Nothing is hidden: every pending job is claimed in the end.
        client.heads_refresh()
        pending = db.execute(
            "SELECT count(*) FROM fairsched.jobs WHERE queue_name = %s AND status = 'pending'", [queue]
        ).fetchone()
        assert pending is not None
        claimed = len(client.claim(queue, owner="w", limit=1000))
        assert claimed == pending[0]


@pytest.mark.parametrize("stack", [("fifo",), ("aging",), ("weighted", "aging")])
def test_a_job_back_to_pending_below_a_raised_head_lowers_it(
    fresh_db: str, db: psycopg.Connection, stack: tuple[str, ...]
) -> None:
    """Each order's head is lowered by its owner's trigger on every update into pending:
    a released job whose key a refresh passed meanwhile is below no head, and claimed in
    its order."""
    with Client(fresh_db) as client:
        client.declare_queue("q", QueueSettings(policies=list(stack), notify=False))
        first = client.enqueue("q", {}, tenant="a")
        client.enqueue("q", {}, tenant="a")
        [lease] = client.claim("q", owner="w")
        assert lease.id == first
        assert client.heads_refresh() >= 1
        assert client.release(lease)
        assert_invariant(db, "q")
        expected = first_claimable(db, "q", "aging" if "aging" in stack else "fifo")
        assert [lease.id for lease in client.claim("q", owner="w")] == [expected]


@pytest.fixture
def fifo(fresh_db: str) -> Iterator[Client]:
    with Client(fresh_db) as client:
        client.declare_queue("q", QueueSettings(notify=False))
        yield client


def test_claims_start_at_the_head_and_a_higher_priority_job_lowers_it(
    fifo: Client, db: psycopg.Connection
) -> None:
    first = [fifo.enqueue("q", {}, tenant="a") for _ in range(3)]
    fifo.claim("q", owner="w", limit=2)
    assert fifo.heads_refresh() == 2, "the default order's head and the aging policy's"
    head = db.execute(
        "SELECT order_rank, order_id FROM fairsched.claim_heads WHERE queue_name = 'q'"
    ).fetchone()
    assert head == (0, first[2])
    urgent = fifo.enqueue("q", {}, tenant="a", priority=5)
    assert_invariant(db, "q")
    assert [lease.id for lease in fifo.claim("q", owner="w", limit=2)] == [urgent, first[2]]
    assert fifo.heads_refresh() == 0, "nothing pending: the heads stay"


def test_a_claim_in_flight_during_a_refresh_leaves_its_jobs_claimable_when_it_aborts(
    fifo: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    job = fifo.enqueue("q", {}, tenant="a")
    fifo.enqueue("q", {}, tenant="a")
    with psycopg.connect(fresh_db) as claimer:
        assert [lease.id for lease in jobs_claim(claimer, "q", owner="aborted")] == [job]
        fifo.heads_refresh()  # its snapshot still sees the job pending
        claimer.rollback()
    assert_invariant(db, "q")
    assert fifo.claim("q", owner="w")[0].id == job


def _wait_until_blocked(db: psycopg.Connection, pid: int) -> None:
    for _ in range(200):
        row = db.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.02)
    raise AssertionError("the enqueue never waited for the refresh's lock")


def test_an_enqueue_waiting_on_a_refresh_lowers_what_the_refresh_raised(
    fifo: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    later = fifo.enqueue("q", {}, tenant="a")
    with psycopg.connect(fresh_db) as refresher, psycopg.connect(fresh_db, autocommit=True) as producer:
        # The refresh (lock, then raise on a snapshot taken after it) holds the heads until
        # its transaction commits.
        assert refresher.execute(QUERIES["claim_heads_refresh"], {"queue": "q"}).fetchone() == (True,)
        pid = producer.info.backend_pid
        enqueued: list[int] = []
        thread = threading.Thread(
            target=lambda: enqueued.append(fifo.enqueue("q", {}, tenant="a", priority=5, conn=producer))
        )
        thread.start()
        _wait_until_blocked(db, pid)
        # The refresh's snapshot could not see the urgent job: it raised the head to `later`.
        refresher.commit()
        thread.join(10)
    assert enqueued, "the enqueue finished"
    assert_invariant(db, "q")
    assert [lease.id for lease in fifo.claim("q", owner="w", limit=2)] == [enqueued[0], later]


def test_a_refresh_skips_heads_held_by_an_open_enqueue(
    fifo: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    fifo.enqueue("q", {}, tenant="a")
    fifo.heads_refresh()
    fifo.claim("q", owner="w")
    later = fifo.enqueue("q", {}, tenant="a")
    with psycopg.connect(fresh_db) as producer:
        urgent = fifo.enqueue("q", {}, tenant="a", priority=5, conn=producer)
        assert fifo.heads_refresh() == 0, "the open transaction holds the heads: the refresh skips them"
        producer.commit()
    assert_invariant(db, "q")
    assert [lease.id for lease in fifo.claim("q", owner="w", limit=2)] == [urgent, later]
