"""A real ``fairsched web`` process and a real Chromium (Debian's, driven by Playwright).

Playwright cannot download its own browser here: the tests launch the ``chromium`` on
PATH (``FAIRSCHED_TEST_CHROMIUM`` names another), which ``PYTHONPATH=tests python
tests/web/web_support.py --install`` installs from Debian when missing (.ci/run does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from playwright.sync_api import Page
from worker_support import FAIRSCHED, Workers, free_port, wait_for

from fairsched import Client, JobSpec, QueueSettings, Settings

TOKEN = "web-test-token-0123456789"
QUEUE = "probe"
"""The probe app's queue, which the tests declare with the policies each needs."""


def chromium_path() -> str:
    """The Chromium executable the tests drive; fails (never skips) when there is none."""
    path = os.environ.get("FAIRSCHED_TEST_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError("no chromium on PATH: PYTHONPATH=tests python tests/web/web_support.py --install")
    return path


def install() -> None:
    """Install Debian's chromium when it is missing."""
    if shutil.which("chromium"):
        print(f"chromium: {shutil.which('chromium')}")
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, check=True)
    print(f"chromium installed: {shutil.which('chromium')}")


@dataclass
class WebServer:
    """One ``fairsched web`` process on a free port of 127.0.0.1."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "static/web.css", timeout=1):
            return True
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def web_server(dsn: str, log_dir: Path, settings: Mapping[str, str] | None = None) -> Iterator[WebServer]:
    """Start ``fairsched web`` on ``dsn`` (token login, actions on, refresh every 0.5 s,
    unless ``settings`` say otherwise); stopped with SIGTERM at the end."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env.update(
        {
            "FAIRSCHED_DATABASE_URL": dsn,
            "FAIRSCHED_WEB__TOKEN": TOKEN,
            "FAIRSCHED_WEB__ACTIONS": "true",
            "FAIRSCHED_WEB__REFRESH_SECONDS": "0.5",
            **(settings or {}),
        }
    )
    log = log_dir / f"web-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(FAIRSCHED), "web", "--bind", f"127.0.0.1:{port}"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = WebServer(proc, f"http://127.0.0.1:{port}/", log)
    try:
        wait_for(lambda: _answers(server.url) or proc.poll() is not None, "fairsched web answering")
        assert proc.poll() is None, f"fairsched web exited:\n{server.output()}"
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        print(f"--- fairsched web ---\n{server.output()}")


def declare(fresh_db: str, **values: Any) -> Client:
    """A client on ``fresh_db`` with the probe queue declared (one attempt, 10 s leases)."""
    client = Client(fresh_db, settings=Settings())
    client.declare_queue(QUEUE, QueueSettings(lease_seconds=10, max_attempts=1, **values))
    return client


def fill(client: Client, tenant: str, count: int, payload: dict[str, Any] | None = None) -> None:
    """``count`` short jobs of ``tenant`` on the probe queue."""
    client.enqueue_many(QUEUE, [JobSpec(payload or {"sleep": 0.02}, tenant=tenant) for _ in range(count)])


def a_dead_job(client: Client, db: psycopg.Connection, workers: Workers, **spec: Any) -> int:
    """A job that a real worker ran and that died (a permanent error), its id."""
    job_id = client.enqueue(QUEUE, {"fail": "permanent", "record": True}, tenant="acme", **spec)
    worker = workers.start({QUEUE: 1})
    wait_for(lambda: status_of(db, job_id) == "dead", f"job {job_id} dead")
    worker.stop()
    return job_id


def status_of(db: psycopg.Connection, job_id: int) -> str | None:
    """A job's status (None once it is gone)."""
    row = db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
    return row[0] if row else None


def log_in(page: Page, server: WebServer) -> None:
    """Log in through the form with the server's token."""
    page.goto(server.url)
    assert page.url.endswith("/login")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(server.url)


if __name__ == "__main__" and sys.argv[1:] == ["--install"]:
    install()
