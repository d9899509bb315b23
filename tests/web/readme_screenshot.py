"""Take docs/images/web-queue.png, the README's picture of the queue page (run by hand).

    FAIRSCHED_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python tests/web/readme_screenshot.py

A scratch database beside the test server's, a demo-like load (three tenants weighing
5, 2 and 1 on a weighted, aging, serial queue (the probe app's queue), two worker processes), the dashboard in
Debian's chromium; the database is dropped after.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import psycopg
from playwright.sync_api import sync_playwright

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from worker_support import Workers, wait_for  # noqa: E402

from fairsched import Client, JobSpec, QueueSettings, Settings  # noqa: E402
from fairsched.db.migrate import migrate  # noqa: E402
from tests.conftest import with_database  # noqa: E402
from web.web_support import TOKEN, chromium_path, web_server  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "docs" / "images" / "web-queue.png"
NAME = "fairsched_web_screenshot"


def main() -> None:
    server = os.environ["FAIRSCHED_TEST_DATABASE_URL"]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {NAME}")
        admin.execute(f"CREATE DATABASE {NAME}")
    dsn = with_database(server, NAME)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
        with Client(dsn, settings=Settings()) as client:
            client.declare_queue("probe", QueueSettings(policies=["weighted", "aging", "serial"]))
            for tenant, weight in (("acme", 5), ("globex", 2), ("initech", 1)):
                client.enqueue_many("probe", [JobSpec({"sleep": 0.02}, tenant=tenant) for _ in range(4000)])
                client.set_tenant_share("probe", tenant, weight=weight)
        with tempfile.TemporaryDirectory() as logs, Workers(dsn, Path(logs)) as workers:
            for _ in range(2):
                workers.start({"probe": 4})
            with web_server(dsn, Path(logs)) as web, sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1200, "height": 760})
                page.goto(web.url)
                page.fill("#token", TOKEN)
                page.click("button[type=submit]")
                page.goto(web.url + "queues/probe")
                wait_for(
                    lambda: int(page.get_attribute("#share-chart", "data-samples") or 0) >= 40,
                    "samples",
                    timeout=60,
                )
                page.screenshot(path=str(OUT), clip={"x": 0, "y": 0, "width": 1200, "height": 760})
                browser.close()
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")
    print(f"{OUT}: {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
