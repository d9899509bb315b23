"""Payload shape and run_at window at enqueue: one clear sentence, nothing enqueued.

Payloads nest at most 100 levels of lists and objects and hold integers of at most 500
digits; ``run_at`` lies between 1 day before now and 3650 days after
(docs/configuration.md, "Per-job values"). Beyond, Python's own limits used to surface
as ``unexpected RecursionError`` or ``unexpected ValueError: Exceeds the limit (4300
digits)``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from cli_support import cli, one_error_line
from fault_support import db_snapshot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fairsched import Client, JobSpec
from fairsched.engine.enqueue import encode_payload
from fairsched.errors import InvalidInput

DEPTH, DIGITS = 100, 500
TOO_DEEP = "payload nests deeper than 100 levels of lists and objects"
TOO_LONG = "payload holds an integer of more than 500 digits: send it as a string"


def nested(depth: int, leaf: Any = 0, *, objects: bool = False) -> Any:
    """``leaf`` inside ``depth`` lists (or objects), built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"k": value} if objects else [value]
    return value


def rejected(db: psycopg.Connection, call: Any, message: str) -> None:
    before = db_snapshot(db)
    with pytest.raises(InvalidInput) as caught:
        call()
    assert str(caught.value) == message
    assert db_snapshot(db) == before


@settings(max_examples=80, deadline=None)
@given(
    depth=st.integers(0, 3 * DEPTH),
    objects=st.booleans(),
    digits=st.integers(1, 2 * DIGITS),
    extra=st.integers(0, 200),
)
@example(depth=DEPTH, objects=False, digits=DIGITS, extra=0)
@example(depth=DEPTH + 1, objects=True, digits=1, extra=0)
@example(depth=0, objects=False, digits=DIGITS + 1, extra=0)
def test_a_payload_is_accepted_exactly_within_the_limits(
    depth: int, objects: bool, digits: int, extra: int
) -> None:
    """Any depth and any integer length, also beside many small containers (which make
    the encoder look at the shape) and digit runs in strings (which do not count)."""
    number = -int("9" * digits)
    payload = {
        "wide": [[] for _ in range(extra)],
        "text": "7" * 600,
        "deep": nested(depth, number, objects=objects),
    }
    depth += 1  # the outer object
    if depth > DEPTH:
        with pytest.raises(InvalidInput, match=TOO_DEEP):
            encode_payload(payload, 10**7)
    elif digits > DIGITS:
        with pytest.raises(InvalidInput, match=TOO_LONG):
            encode_payload(payload, 10**7)
    else:
        assert str(number) in encode_payload(payload, 10**7)


@pytest.mark.parametrize(
    "payload, message",
    [
        (nested(100_000), TOO_DEEP),
        (nested(DEPTH + 1), TOO_DEEP),
        (nested(5000, objects=True), TOO_DEEP),
        (10**4999, TOO_LONG),
        ({"amount": -(10**DIGITS)}, TOO_LONG),
    ],
    ids=["100k-deep", "101-deep", "5000-deep-objects", "5000-digits", "501-digits"],
)
def test_the_api_refuses_a_payload_past_the_limits_in_one_sentence(
    client: Client, db: psycopg.Connection, payload: Any, message: str
) -> None:
    rejected(db, lambda: client.enqueue("q", payload, tenant="t"), message)
    batch = [JobSpec({"n": 1}, tenant="t"), JobSpec(payload, tenant="t")]
    rejected(db, lambda: client.enqueue_many("q", batch), message)


def test_a_payload_at_the_limits_round_trips(client: Client) -> None:
    payload = {"deep": nested(DEPTH - 1), "big": -(10**DIGITS - 1), "cyclic-looking": [[1]] * 3}
    job_id = client.enqueue("q", payload, tenant="t")
    assert client.job_show(job_id)["payload"] == payload


def test_a_circular_payload_is_refused_as_before(client: Client, db: psycopg.Connection) -> None:
    loop: list[Any] = []
    loop.append(loop)
    rejected(
        db,
        lambda: client.enqueue("q", loop, tenant="t"),
        "payload is not JSON-serialisable: Circular reference detected",
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, TOO_DEEP),
        ("[" * (DEPTH + 1) + "]" * (DEPTH + 1), TOO_DEEP),
        ("1" * 5000, TOO_LONG),
        ('{"n": -' + "9" * (DIGITS + 1) + "}", TOO_LONG),
    ],
    ids=["100k-deep", "101-deep", "5000-digits", "501-digits"],
)
def test_the_cli_refuses_a_payload_past_the_limits_in_one_sentence(
    client: Client, db: psycopg.Connection, text: str, message: str
) -> None:
    before = db_snapshot(db)
    result = cli(client.dsn, "enqueue", "--queue", "q", "--tenant", "t", "--payload", text)
    assert result.exit_code == 1, result.output
    assert one_error_line(result) == f"error: {message}"
    assert db_snapshot(db) == before


def test_the_cli_takes_a_payload_at_the_limits(client: Client) -> None:
    text = "[" * (DEPTH - 1) + "9" * DIGITS + "]" * (DEPTH - 1)
    result = cli(client.dsn, "enqueue", "--queue", "q", "--tenant", "t", "--payload", text)
    assert result.exit_code == 0, result.output
    assert client.job_show(int(result.stdout))["payload"] == nested(DEPTH - 1, int("9" * DIGITS))


# -- run_at --------------------------------------------------------------------------------

NOW = datetime.now(UTC)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.floats(min_value=-3e9, max_value=3e9, allow_nan=False))
@example(offset=-86_400 - 60)
@example(offset=-86_400 + 60)
@example(offset=3650 * 86_400 - 60)
@example(offset=3650 * 86_400 + 60)
def test_run_at_is_accepted_exactly_within_its_window(
    client: Client, db: psycopg.Connection, offset: float
) -> None:
    """Offsets within a minute of an end are left out: the window moves with the clock."""
    ends = (-86_400, 3650 * 86_400)
    if any(abs(offset - end) < 30 for end in ends):
        return
    when = datetime.now(UTC) + timedelta(seconds=offset)
    if ends[0] < offset < ends[1]:
        job_id = client.enqueue("q", {}, tenant="t", run_at=when)
        row = db.execute("SELECT available_at FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
        assert row is not None and abs((row[0] - when).total_seconds()) < 1e-3
    else:
        with pytest.raises(
            InvalidInput, match="run_at must lie between 1 day before now and 3650 days after"
        ):
            client.enqueue("q", {}, tenant="t", run_at=when)


@pytest.mark.parametrize(
    "when",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
        datetime(9999, 12, 31, tzinfo=UTC),
        NOW - timedelta(days=2),
        NOW + timedelta(days=3651),
    ],
)
def test_run_at_out_of_its_window_is_refused_and_nothing_enqueued(
    client: Client, db: psycopg.Connection, when: datetime
) -> None:
    before = db_snapshot(db)
    with pytest.raises(InvalidInput, match=r"run_at must lie between .*, got \d"):
        client.enqueue_many("q", [JobSpec({}, tenant="t"), JobSpec({}, tenant="t", run_at=when)])
    result = cli(client.dsn, "enqueue", "--queue", "q", "--tenant", "t", "--run-at", when.isoformat())
    assert result.exit_code == 1
    assert "run_at must lie between 1 day before now and 3650 days after" in one_error_line(result)
    assert db_snapshot(db) == before
