"""Capacity across queues: the split rule, the shared slot ledger, and real workers sharing slots.

The worker tests count how many jobs of each queue ran at every instant from
the handlers' own start/end times (database time, ``tests/apps/capacity.py``):
a handler runs inside the slot its claim took, so these counts never exceed
what the worker's ledger granted.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from apps.capacity import create_runs_table
from cli_support import cli, one_error_line
from hypothesis import given, settings
from hypothesis import strategies as st
from worker_support import WorkerProcess, Workers, running_workers, wait_for

from fairsched import Client, JobSpec, QueueSettings, Settings
from fairsched.config.capacity import Slots, Split, entitlements, grant, parse_weighted
from fairsched.errors import InvalidInput

APP = "apps.capacity:app"

# -- the split rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        (16, {"emails": 3, "reports": 1}, {"emails": 12, "reports": 4}),
        (8, {"emails": 3, "reports": 1}, {"emails": 6, "reports": 2}),
        (10, {"a": 1, "b": 1, "c": 1}, {"a": 4, "b": 3, "c": 3}),
        (4, {"big": 10, "small": 1}, {"big": 3, "small": 1}),
        (3, {"a": 100, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 1}),
        (7, {"only": 2.5}, {"only": 7}),
    ],
)
def test_entitlements_by_largest_remainder_at_least_one(
    total: int, weights: dict[str, float], expected: dict[str, int]
) -> None:
    assert entitlements(total, weights) == expected


@pytest.mark.parametrize(
    ("total", "weights", "message"),
    [
        (1, {"a": 1, "b": 1}, "cannot give each of 2 queues one"),
        (4, {"a": 0}, "must be positive"),
        (4, {"a": -1}, "must be positive"),
        (4, {"a": math.nan}, "must be positive"),
        (4, {}, "at least one queue"),
    ],
)
def test_entitlements_refuse_impossible_splits(total: int, weights: dict[str, float], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        entitlements(total, weights)


weights_st = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.floats(min_value=0.01, max_value=1000, allow_nan=False),
    min_size=1,
)


@given(weights=weights_st, extra=st.integers(min_value=0, max_value=200))
def test_entitlements_add_up_and_follow_weights(weights: dict[str, float], extra: int) -> None:
    total = len(weights) + extra
    shares = entitlements(total, weights)
    assert sum(shares.values()) == total
    assert min(shares.values()) >= 1
    quotas = {q: total * w / sum(weights.values()) for q, w in weights.items()}
    if min(quotas.values()) >= 1:
        assert all(abs(shares[q] - quotas[q]) < 1 for q in weights)


@st.composite
def ledger_states(draw: st.DrawFn) -> tuple[int, dict[str, int], dict[str, int], set[str]]:
    """A weighted split and a reachable moment: slots held per queue (at most the total) and
    the queues that have work."""
    weights = draw(weights_st)
    total = len(weights) + draw(st.integers(min_value=0, max_value=40))
    entitled = entitlements(total, weights)
    held: dict[str, int] = {}
    left = total
    for q in entitled:
        held[q] = draw(st.integers(min_value=0, max_value=left))
        left -= held[q]
    wanting = set(draw(st.lists(st.sampled_from(sorted(entitled)), unique=True)))
    return total, entitled, held, wanting


@given(state=ledger_states())
def test_a_grant_never_exceeds_the_free_slots(
    state: tuple[int, dict[str, int], dict[str, int], set[str]],
) -> None:
    total, entitled, held, wanting = state
    free = total - sum(held.values())
    for q in entitled:
        n = grant(q, total=total, entitled=entitled, held=held, wanting=wanting | {q})
        assert 0 <= n <= free
        assert n >= min(free, entitled[q] - held[q]), "a queue always gets its unused entitlement"


@given(state=ledger_states())
def test_with_work_everywhere_nobody_grows_past_its_entitlement(
    state: tuple[int, dict[str, int], dict[str, int], set[str]],
) -> None:
    total, entitled, held, _ = state
    everyone = set(entitled)
    for q in entitled:
        n = grant(q, total=total, entitled=entitled, held=held, wanting=everyone)
        assert held[q] + n <= max(entitled[q], held[q])


@given(state=ledger_states())
def test_idle_capacity_is_fully_lent(state: tuple[int, dict[str, int], dict[str, int], set[str]]) -> None:
    total, entitled, held, _ = state
    for q in entitled:
        assert grant(q, total=total, entitled=entitled, held=held, wanting={q}) == total - sum(held.values())


@given(state=ledger_states())
def test_slots_owed_to_an_owner_with_work_are_not_lent(
    state: tuple[int, dict[str, int], dict[str, int], set[str]],
) -> None:
    total, entitled, held, wanting = state
    free = total - sum(held.values())
    owed = {p: max(0, entitled[p] - held[p]) for p in wanting}
    for q in entitled:
        n = grant(q, total=total, entitled=entitled, held=held, wanting=wanting | {q})
        beyond = max(0, held[q] + n - max(entitled[q], held[q]))
        assert beyond <= max(0, free - sum(v for p, v in owed.items() if p != q))


def test_a_static_split_never_lends() -> None:
    entitled = {"emails": 8, "reports": 2}
    held = {"emails": 8, "reports": 0}
    assert grant("emails", total=10, entitled=entitled, held=held, wanting={"emails"}, lend=False) == 0
    assert Split.static(entitled).most("emails") == 8
    assert Split.weighted(10, {"emails": 4, "reports": 1}).most("reports") == 10


# -- the shared ledger -----------------------------------------------------------------


@dataclass
class Sim:
    """Queues always saturated with work, claiming through one :class:`Slots`; jobs finish
    oldest first."""

    slots: Slots
    running: list[str]

    def claim_round(self, order: list[str]) -> None:
        for q in order:
            n = self.slots.take(q, self.slots.split.total)
            self.slots.claimed(q, n, n)
            self.running += [q] * n

    def finish_oldest(self) -> None:
        self.slots.finished(self.running.pop(0))


@settings(max_examples=60, deadline=None)
@given(weights=weights_st, extra=st.integers(min_value=0, max_value=24), seed=st.integers(0, 2**16))
def test_saturated_queues_converge_to_their_entitlements(
    weights: dict[str, float], extra: int, seed: int
) -> None:
    """Whoever borrowed first, every queue with work ends with exactly its entitlement, and
    the running jobs never exceed the total."""
    rng = random.Random(seed)
    split = Split.weighted(len(weights) + extra, weights)
    sim = Sim(Slots(split, lambda q: None), [])
    first = rng.choice(list(split))
    sim.claim_round([first])  # one queue borrows every slot before the others ask
    assert sim.slots.held()[first] == split.total
    for _ in range(2 * split.total):
        sim.finish_oldest()
        sim.claim_round(rng.sample(list(split), len(split)))
        assert sum(sim.slots.held().values()) <= split.total
    assert sim.slots.held() == dict(split.entitled)


def test_an_idle_queue_lends_and_gets_its_slots_back_as_borrowed_jobs_finish() -> None:
    woken: list[str] = []
    slots = Slots(Split.weighted(8, {"emails": 3, "reports": 1}), woken.append)
    assert slots.take("reports", 8) == 8, "reports first: nothing else has work, it borrows all 8"
    slots.claimed("reports", 8, 8)
    assert slots.take("emails", 8) == 0, "emails has work now, but every slot is held"
    slots.finished("reports")
    assert woken == ["emails"]
    assert slots.take("reports", 8) == 0, "the freed slot is owed to emails"
    assert slots.take("emails", 8) == 1
    slots.claimed("emails", 1, 1)
    for _ in range(5):
        slots.finished("reports")
        assert slots.take("reports", 8) == 0
        assert slots.take("emails", 8) == 1
        slots.claimed("emails", 1, 1)
    assert slots.held() == {"emails": 6, "reports": 2}
    slots.finished("emails")
    assert slots.take("emails", 8) == 1
    slots.claimed("emails", 1, 0)  # emails ran out of work: its idle slot is lendable again
    assert slots.take("reports", 8) == 1
    assert slots.held() == {"emails": 5, "reports": 3}


def test_a_short_claim_that_expects_more_keeps_its_slots_owed() -> None:
    """A tenant-first claim comes back short while other tenants still have plenty: the
    claimer claims again at once, and its idle slots are not lent meanwhile."""
    slots = Slots(Split.weighted(8, {"emails": 1, "reports": 1}), lambda q: None)
    assert slots.take("emails", 4) == 4
    slots.claimed("emails", 4, 1, more=True)
    assert slots.take("reports", 8) == 4, "3 of the free slots are still owed to emails"
    slots.claimed("reports", 4, 4)
    assert slots.take("emails", 8) == 3
    slots.claimed("emails", 3, 0)  # nothing left: now its idle slots are lendable
    slots.finished("reports")
    assert slots.take("reports", 8) == 4
    assert slots.held() == {"emails": 1, "reports": 7}


def test_a_claim_that_fails_gives_its_slots_back() -> None:
    slots = Slots(Split.weighted(4, {"a": 1, "b": 1}), lambda q: None)
    assert slots.take("a", 4) == 4
    slots.claimed("a", 4, 0)
    assert slots.held() == {"a": 0, "b": 0}


# -- the command line ---------------------------------------------------------------------


def test_parse_weighted_takes_weights_from_config_and_defaults_to_one() -> None:
    split = parse_weighted(["emails", "reports", "audit"], 10, {"emails": 3})
    assert (split.total, dict(split.entitled), split.lend) == (
        10,
        {"emails": 6, "reports": 2, "audit": 2},
        True,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "8", "--queue", "emails=4"], "with --concurrency give bare queue names"),
        (["--concurrency", "8", "--queue", "emails", "--queue", "emails"], "given twice"),
        (["--concurrency", "1", "--queue", "emails", "--queue", "reports"], "cannot give each of 2 queues"),
        (["--concurrency", "8", "--queue", "bad name"], "invalid queue name"),
        (["--queue", "emails"], "expected queue=slots"),
    ],
)
def test_worker_refuses_bad_splits_in_one_line(args: list[str], message: str) -> None:
    result = cli(None, "worker", "--app", APP, *args)
    assert result.exit_code == 1
    assert message in one_error_line(result)


@pytest.mark.parametrize("value", ["0", "1001", "many"])
def test_worker_concurrency_out_of_range_is_a_usage_error(value: str) -> None:
    result = cli(None, "worker", "--app", APP, "--concurrency", value, "--queue", "emails")
    assert result.exit_code == 2
    assert "--concurrency" in result.output


def test_a_queue_weight_must_be_positive(tmp_path: Path) -> None:
    config = tmp_path / "fairsched.toml"
    config.write_text("[queues.emails]\nweight = 0\n")
    result = cli(
        None, "worker", "--app", APP, "--concurrency", "4", "--queue", "emails", "--config", str(config)
    )
    assert result.exit_code == 1
    assert "queues.emails.weight: Input should be greater than 0" in one_error_line(result)


# -- real workers -------------------------------------------------------------------------


@pytest.fixture
def client(fresh_db: str, db: psycopg.Connection) -> Iterator[Client]:
    create_runs_table(db)
    with Client(fresh_db, settings=Settings()) as c:
        for queue in ("emails", "reports"):
            c.declare_queue(queue, QueueSettings(lease_seconds=10))
        yield c


@pytest.fixture
def workers(fresh_db: str, tmp_path: Path) -> Iterator[Workers]:
    with running_workers(fresh_db, tmp_path, APP) as w:
        yield w


def start_weighted(workers: Workers, tmp_path: Path, total: int, weights: dict[str, int]) -> WorkerProcess:
    config = tmp_path / "weights.toml"
    config.write_text("".join(f"[queues.{q}]\nweight = {w}\n" for q, w in weights.items()))
    args = ["--concurrency", str(total)]
    for q in weights:
        args += ["--queue", q]
    return workers.start({}, settings={"FAIRSCHED_CONFIG": str(config)}, extra_args=tuple(args))


def fill(client: Client, queue: str, count: int, sleep: float = 0.2) -> None:
    client.enqueue_many(queue, [JobSpec({"sleep": sleep}, tenant="t") for _ in range(count)])


def db_now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def runs_of(db: psycopg.Connection, queue: str) -> int:
    row = db.execute("SELECT count(*) FROM public.capacity_runs WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def running_sample(db: psycopg.Connection) -> tuple[datetime, int, int]:
    """Jobs in ``running`` per queue, as the database shows them now."""
    row = db.execute(
        "SELECT clock_timestamp(),"
        " count(*) FILTER (WHERE queue_name = 'emails'), count(*) FILTER (WHERE queue_name = 'reports')"
        " FROM fairsched.jobs WHERE status = 'running'"
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


@dataclass
class Occupancy:
    """Handlers running per queue over a window: the most at once, the time-weighted mean."""

    most: dict[str, int]
    mean: dict[str, float]
    most_total: int


def occupancy(db: psycopg.Connection, since: datetime, until: datetime) -> Occupancy:
    runs = db.execute("SELECT queue, started_at, ended_at FROM public.capacity_runs").fetchall()
    events = sorted([(s, 1, q) for q, s, _ in runs] + [(e, -1, q) for q, _, e in runs])
    now = dict.fromkeys(("emails", "reports"), 0)
    most = dict.fromkeys(now, 0)
    area = dict.fromkeys(now, 0.0)
    most_total = 0
    last = since
    for at, step, q in events:  # ends sort before starts at the same instant
        if at > since:
            span = (min(at, until) - max(last, since)).total_seconds()
            for name in now:
                area[name] += now[name] * max(0.0, span)
            last = at
        now[q] += step
        if since <= at < until:
            most[q] = max(most[q], now[q])
            most_total = max(most_total, sum(now.values()))
    seconds = (until - since).total_seconds()
    return Occupancy(most, {q: a / seconds for q, a in area.items()}, most_total)


def first_reaching(db: psycopg.Connection, queue: str, count: int, since: datetime) -> datetime:
    """The first instant after ``since`` with ``count`` handlers of ``queue`` running."""
    row = db.execute(
        "SELECT min(s.started_at) FROM public.capacity_runs s"
        " WHERE s.queue = %(q)s AND s.started_at >= %(since)s AND (SELECT count(*)"
        "   FROM public.capacity_runs r WHERE r.queue = %(q)s"
        "    AND r.started_at <= s.started_at AND r.ended_at > s.started_at) >= %(n)s",
        {"q": queue, "since": since, "n": count},
    ).fetchone()
    assert row is not None and row[0] is not None, f"{queue} never ran {count} at once"
    return row[0]  # type: ignore[no-any-return]


def test_saturated_queues_share_slots_by_weight(
    client: Client, db: psycopg.Connection, workers: Workers, tmp_path: Path
) -> None:
    fill(client, "emails", 600)
    fill(client, "reports", 300)
    start = db_now(db)
    worker = start_weighted(workers, tmp_path, 8, {"emails": 3, "reports": 1})
    samples: list[tuple[datetime, int, int]] = []

    def enough_ran() -> bool:
        samples.append(running_sample(db))
        return runs_of(db, "reports") >= 40 and runs_of(db, "emails") >= 120

    wait_for(enough_ran, "both queues ran a while", timeout=60)
    end = db_now(db)
    assert worker.stop() == 0

    # Steady once both queues have claimed: the claimer that starts first may borrow every
    # slot the other, not yet wanting, is owed, until those jobs end.
    steady = max(first_reaching(db, "reports", 2, start), first_reaching(db, "emails", 6, start))
    whole = occupancy(db, start, end)
    window = occupancy(db, steady, end)
    in_window = Counter((e, r) for at, e, r in samples if at >= steady)
    print(f"steady from {steady}; window {window}; whole run {whole}; DB samples {in_window.most_common()}")
    assert whole.most_total <= 8
    assert window.most == {"emails": 6, "reports": 2}, window
    assert window.mean["emails"] > 2 * window.mean["reports"], window
    assert in_window.most_common(1)[0][0] == (6, 2), in_window


def test_an_idle_queue_lends_its_slots_and_gets_them_back(
    client: Client, db: psycopg.Connection, workers: Workers, tmp_path: Path
) -> None:
    fill(client, "emails", 600)
    start = db_now(db)
    worker = start_weighted(workers, tmp_path, 8, {"emails": 3, "reports": 1})
    wait_for(lambda: running_sample(db)[1] >= 8, "emails borrows the idle reports slots")
    wait_for(lambda: runs_of(db, "emails") >= 16, "emails ran two rounds of 8")
    lent_until = db_now(db)
    fill(client, "reports", 100)
    row = db.execute("SELECT min(created_at) FROM fairsched.jobs WHERE queue_name = 'reports'").fetchone()
    assert row is not None
    returned = row[0]
    wait_for(lambda: runs_of(db, "reports") >= 20, "reports ran a while")
    end = db_now(db)
    assert worker.stop() == 0

    lending = occupancy(db, start, lent_until)
    back = first_reaching(db, "reports", 2, returned)
    row = db.execute(
        "SELECT count(*) FROM public.capacity_runs WHERE queue = 'emails'"
        " AND started_at > %s AND started_at < %s",
        (returned, back),
    ).fetchone()
    assert row is not None
    emails_started_meanwhile = row[0]
    after = occupancy(db, back, end)
    print(f"lending {lending}; emails jobs started before reports had 2: {emails_started_meanwhile}; {after}")
    assert lending.most == {"emails": 8, "reports": 0}
    assert emails_started_meanwhile <= 16, "reports waited more than two rounds of the slots"
    assert after.most == {"emails": 6, "reports": 2}
    assert after.most_total <= 8
