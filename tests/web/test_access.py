"""Who may look and who may change: a change without the login, the CSRF field or from
another origin is refused, a read-only dashboard refuses every change, a proxy's user is
recorded as the one who acted, the shipped roles (fairsched_reader serves every page and
changes nothing, fairsched_web makes the actions and writes no table), and bad input
gets an error page with a 4xx status and changes nothing."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from apps.probe import create_probe_tables
from playwright.sync_api import Page
from psycopg.conninfo import make_conninfo
from worker_support import Workers

from web.web_support import QUEUE, WebServer, a_dead_job, declare, fill, log_in, status_of, web_server


@pytest.mark.parametrize("reason", ["no login", "no csrf", "wrong csrf", "other origin"])
def test_a_change_without_login_or_csrf_is_refused(
    fresh_db: str, reason: str, server: WebServer, page: Page
) -> None:
    with declare(fresh_db, policies=["weighted"]) as client:
        fill(client, "acme", 5)
        client.set_tenant_share(QUEUE, "acme", weight=2)
    form = {"queue": QUEUE, "tenant": "acme", "weight": "9", "confirmed": "1"}
    headers = {}
    if reason != "no login":
        log_in(page, server)
        page.goto(f"{server.url}queues/{QUEUE}")
        csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "fairsched_csrf")
        form["csrf"] = {"no csrf": "", "wrong csrf": csrf[::-1], "other origin": csrf}[reason]
        if reason == "other origin":
            headers["Origin"] = "https://evil.example"
    response = page.request.post(f"{server.url}actions/tenant", form=form, headers=headers, max_redirects=0)
    assert response.status == (401 if reason == "no login" else 403), response.text()
    with declare(fresh_db, policies=["weighted"]) as client:
        assert {s.tenant: s.weight for s in client.tenant_shares(QUEUE)} == {"acme": 2.0}


def test_bad_input_gets_a_clear_error_and_changes_nothing(
    fresh_db: str, db: psycopg.Connection, server: WebServer, page: Page
) -> None:
    with declare(fresh_db, policies=["weighted"]) as client:
        fill(client, "acme", 5)
    log_in(page, server)
    for path, status in [
        ("queues/no%20such%20queue", 400),
        ("queues/nosuch", 404),
        ("queues/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404),  # the %2F makes it no route
        ("queues/%3Cb%3Ebold%22'", 400),
        ("jobs/999999999", 404),
        ("jobs/-1", 400),
        ("jobs/99999999999999999999999", 400),
        (f"queues/{QUEUE}?sort=id;drop", 400),
        (f"queues/{QUEUE}?page=0", 400),
        ("dead?limit=100000", 400),
        ("dead?tenant=%00", 400),
    ]:
        response = page.goto(server.url + path)
        assert response is not None and response.status == status, (path, response and response.status)
        assert page.locator("#error").count() == 1, path
        assert "<script>" not in page.content().replace("&lt;script&gt;", ""), path
    page.goto(f"{server.url}queues/{QUEUE}")
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "fairsched_csrf")
    before = db.execute("SELECT tenant, weight, cap FROM fairsched.tenant_shares ORDER BY 1").fetchall()
    for form, status in [
        ({"queue": QUEUE, "tenant": "acme", "weight": "1e9"}, 400),
        ({"queue": QUEUE, "tenant": "acme", "weight": "nan"}, 400),
        ({"queue": QUEUE, "tenant": "acme", "cap": "-1"}, 400),
        ({"queue": QUEUE, "tenant": "x" * 200, "weight": "2"}, 400),
        ({"queue": "no such", "tenant": "acme", "weight": "2"}, 400),
        ({"queue": "nosuch", "tenant": "acme", "weight": "2"}, 404),
        ({"queue": QUEUE, "tenant": "acme", "weight": "2", "pad": "x" * 20_000}, 413),
    ]:
        response = page.request.post(
            f"{server.url}actions/tenant", form={**form, "csrf": csrf, "confirmed": "1"}
        )
        assert response.status == status, (
            form.get("weight"),
            form.get("cap"),
            response.status,
            response.text()[:200],
        )
    for form, status in [({"job": "999999999", "do": "replay"}, 404), ({"job": "1", "do": "drop"}, 400)]:
        response = page.request.post(
            f"{server.url}actions/dead", form={**form, "csrf": csrf, "confirmed": "1"}
        )
        assert response.status == status, (form, response.status)
    after = db.execute("SELECT tenant, weight, cap FROM fairsched.tenant_shares ORDER BY 1").fetchall()
    assert after == before


def test_a_read_only_dashboard_refuses_every_change(fresh_db: str, tmp_path: Path, page: Page) -> None:
    with declare(fresh_db, policies=["weighted"]) as client:
        fill(client, "acme", 5)
    with web_server(fresh_db, tmp_path, {"FAIRSCHED_WEB__ACTIONS": "false"}) as server:
        log_in(page, server)
        page.goto(f"{server.url}queues/{QUEUE}")
        assert page.locator("a:text('change')").count() == 0
        csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "fairsched_csrf")
        response = page.request.post(
            f"{server.url}actions/tenant",
            form={"queue": QUEUE, "tenant": "acme", "weight": "5", "csrf": csrf},
        )
        assert response.status == 403
        assert "actions are off" in response.text()


def test_a_user_named_by_the_proxy_is_recorded_as_the_one_who_acted(
    fresh_db: str, db: psycopg.Connection, workers: Workers, tmp_path: Path, page: Page
) -> None:
    with declare(fresh_db) as client:
        job_id = a_dead_job(client, db, workers)
    proxy = {"FAIRSCHED_WEB__TRUSTED_HEADER": "X-Forwarded-User"}
    with web_server(fresh_db, tmp_path, proxy) as server:
        anonymous = page.goto(server.url)
        assert anonymous is not None and page.url.endswith("/login")  # no header: the token login
        page.set_extra_http_headers({"X-Forwarded-User": "ada@example.com"})
        page.goto(f"{server.url}jobs/{job_id}")
        assert "ada@example.com" in page.inner_text("header")
        page.locator("button:text('discard')").click()
        assert "web:ada@example.com" in page.inner_text("main")
        page.click("#confirm")
    row = db.execute(
        "SELECT detail->>'by' FROM fairsched.job_events WHERE job_id = %s AND kind = 'discarded'", (job_id,)
    ).fetchone()
    assert row == ("web:ada@example.com",)


def test_the_reader_role_serves_every_page_and_changes_nothing(
    fresh_db: str, db: psycopg.Connection, workers: Workers, tmp_path: Path, page: Page
) -> None:
    create_probe_tables(db)
    with declare(fresh_db, policies=["weighted", "serial"]) as client:
        fill(client, "acme", 5)
        job_id = a_dead_job(client, db, workers, aggregate_key="order-1", aggregate_seq=1)
    reader = make_conninfo(fresh_db, options="-c role=fairsched_reader")
    with web_server(reader, tmp_path) as server:
        log_in(page, server)
        for path in ["", f"queues/{QUEUE}", "starvation", "aggregates", "dead", f"jobs/{job_id}"]:
            response = page.goto(server.url + path)
            assert response is not None and response.status == 200, (path, page.inner_text("main"))
        assert page.console.errors == []  # type: ignore[attr-defined]
        page.goto(f"{server.url}dead")
        page.locator(f"tr[data-job='{job_id}'] button:text('replay')").click()
        with page.expect_response(f"{server.url}actions/dead") as refused:
            page.click("#confirm")
        assert refused.value.status == 403
        assert "permission denied" in page.inner_text("#error")
    assert status_of(db, job_id) == "dead"


def test_the_web_role_makes_the_actions_and_writes_no_table(
    fresh_db: str, db: psycopg.Connection, workers: Workers, tmp_path: Path, page: Page
) -> None:
    """fairsched_web (docs/web.md) replays, discards, cancels and sets weights through the
    page, and is refused every write of its own."""
    create_probe_tables(db)
    with declare(fresh_db, policies=["weighted"]) as client:
        replayed = a_dead_job(client, db, workers)
        discarded = a_dead_job(client, db, workers)
        queued = client.enqueue(QUEUE, {}, tenant="acme")
    web_role = make_conninfo(fresh_db, options="-c role=fairsched_web")
    with web_server(web_role, tmp_path) as server:
        log_in(page, server)
        for job_id, button in [(replayed, "replay"), (discarded, "discard"), (queued, "cancel")]:
            page.goto(f"{server.url}jobs/{job_id}")
            page.locator(f"button:text('{button}')").click()
            page.click("#confirm")
            assert page.locator("#done").count() == 1, page.inner_text("main")
        page.goto(f"{server.url}actions/tenant?queue={QUEUE}&tenant=acme")
        page.fill("#weight", "3")
        page.click("#preview")
        page.click("#confirm")
        assert "changed" in page.inner_text("#done")
    assert [status_of(db, j) for j in (replayed, discarded, queued)] == ["pending", "discarded", "cancelled"]
    assert db.execute("SELECT by, detail->>'weight' FROM fairsched.admin_events").fetchall() == [
        ("web:token", "3")
    ]
    with psycopg.connect(web_role, autocommit=True) as conn:
        for statement in (
            "UPDATE fairsched.jobs SET status = 'succeeded'",
            "UPDATE fairsched.tenant_shares SET weight = 1000",
            "INSERT INTO fairsched.job_events (job_id, kind) VALUES (1, 'forged')",
            "DELETE FROM fairsched.admin_events",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


HOSTILE = "<img src=x onerror=alert(1)>\"'&"


def test_a_hostile_tenant_name_is_shown_as_text_and_runs_nothing(
    fresh_db: str, server: WebServer, page: Page
) -> None:
    with declare(fresh_db, policies=["weighted"]) as client:
        fill(client, HOSTILE, 3)
        client.set_tenant_share(QUEUE, HOSTILE, weight=2)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page, server)
    page.goto(f"{server.url}queues/{QUEUE}")
    page.wait_for_timeout(1500)  # live refreshes and chart samples
    assert HOSTILE in page.inner_text("#tenants")
    assert HOSTILE in page.inner_text("#share-chart")  # the chart's legend
    page.goto(f"{server.url}actions/tenant?queue={QUEUE}&tenant={quote(HOSTILE)}")
    assert HOSTILE in page.inner_text("h1")
    assert page.locator("img").count() == 0
    assert dialogs == []
    assert page.console.errors == []  # type: ignore[attr-defined]
