"""``fairsched exporter`` as a real process: it says where it listens."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from worker_support import free_port


def metrics(url: str) -> str:
    """The page at ``url``, once the server answers (within 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("asked", ["given", "any"])
def test_exporter_says_where_it_listens(fresh_db: str, asked: str) -> None:
    """Once bound; with ``--port 0`` the line names the port the system chose."""
    port = free_port() if asked == "given" else 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env["FAIRSCHED_DATABASE_URL"] = fresh_db
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "fairsched"),
            "exporter",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        first = proc.stderr.readline() if ready else "(nothing within 60s)"
        listening = re.fullmatch(r"exporter listening on (http://127\.0\.0\.1:(\d+)/metrics)", first.strip())
        assert listening, first
        scraped = metrics(listening.group(1))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert listening.group(2) == str(port) if port else int(listening.group(2)) > 0
    assert "fairsched_exporter_scrape_success" in scraped
    assert proc.returncode == 0, err
    assert out == ""
