"""Tests of the example application's jobs, with fairsched.testing (docs/testing.md)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from shop_jobs import app, mailer, place_order

from fairsched import Client, QueueSettings, Settings
from fairsched.testing import RunStatus, assert_enqueued, drain, refute_enqueued, run_job


@pytest.fixture
def fairsched_settings() -> Settings:
    """The queues fairsched_client declares in each test's database (retries due at once)."""
    receipts = QueueSettings(max_attempts=3, backoff_base_seconds=0, backoff_max_seconds=0)
    return Settings(queues={"receipts": receipts})


@pytest.fixture(autouse=True)
def sent() -> Iterator[list[str]]:
    mailer.sent.clear()
    mailer.down = False
    yield mailer.sent


def test_a_receipt_is_sent(fairsched_client: Client, sent: list[str]) -> None:
    order = {"order": 1, "email": "ann@example.com"}
    outcome = run_job(app, "receipts", order, tenant="acme", client=fairsched_client)
    assert outcome.status == RunStatus.SUCCEEDED
    assert outcome.progress == ("rendered", "sent")
    assert sent == ["ann@example.com"]


def test_an_order_without_an_address_is_dead_at_once(fairsched_client: Client) -> None:
    outcome = run_job(app, "receipts", {"order": 2}, tenant="acme", client=fairsched_client)
    assert outcome.status == RunStatus.DEAD
    assert outcome.error_kind == "permanent"


def test_a_mail_outage_is_retried(fairsched_client: Client) -> None:
    mailer.down = True
    order = {"order": 3, "email": "bo@example.com"}
    outcome = run_job(app, "receipts", order, tenant="acme", client=fairsched_client)
    assert outcome.status == RunStatus.RETRY_SCHEDULED
    assert (outcome.error_kind, outcome.error_code) == ("retryable", "TimeoutError")


def test_placing_an_order_enqueues_its_receipt(
    fairsched_client: Client, fairsched_conn: psycopg.Connection
) -> None:
    with fairsched_conn.transaction():
        place_order(fairsched_client, tenant="acme", order=4, email="cy@example.com", conn=fairsched_conn)
        # Not committed: this transaction sees the job, other sessions do not yet.
        assert_enqueued(
            conn=fairsched_conn,
            queue="receipts",
            tenant="acme",
            payload={"order": 4, "email": "cy@example.com"},
        )
        refute_enqueued(conn=fairsched_client, queue="receipts")


def test_a_backlog_drains(fairsched_client: Client, sent: list[str]) -> None:
    for order in range(5):
        place_order(fairsched_client, tenant="acme", order=order, email=f"{order}@example.com")
    outcomes = drain(fairsched_client, app, "receipts")
    assert [o.status for o in outcomes] == [RunStatus.SUCCEEDED] * 5
    assert sorted(sent) == [f"{order}@example.com" for order in range(5)]
    assert drain(fairsched_client, app, "receipts") == []
