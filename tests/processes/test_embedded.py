"""The zero-setup path: without FAIRSCHED_DATABASE_URL the CLI starts, then reuses, an embedded server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import cli_process


def postmaster_pid(data_dir: Path) -> int:
    """The running server's pid, from the first line of ``postmaster.pid``."""
    return int((data_dir / "postmaster.pid").read_text().splitlines()[0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory for a server the test starts; the server is stopped afterwards."""
    path = tmp_path / "pgdata"
    yield path
    if (path / "postmaster.pid").exists():
        pid = postmaster_pid(path)
        os.kill(pid, signal.SIGINT)  # fast shutdown
        deadline = time.monotonic() + 60
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)


def test_migrate_starts_the_embedded_server_then_reuses_it(data_dir: Path) -> None:
    env = {"FAIRSCHED_DATA_DIR": str(data_dir)}
    first = cli_process(["migrate"], env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("applied: 001_")
    pid = postmaster_pid(data_dir)
    assert alive(pid)

    second = cli_process(["migrate"], env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "schema is up to date"
    assert postmaster_pid(data_dir) == pid

    recovered = cli_process(["recover", "--json"], env)
    assert recovered.returncode == 0, recovered.stderr
    assert postmaster_pid(data_dir) == pid


def test_a_server_not_kept_running_stops_when_the_process_that_started_it_exits(data_dir: Path) -> None:
    """The test fixture's server (``keep_running=False``) is not left behind by the run."""
    code = (
        "import sys; from pathlib import Path; from fairsched.db.embedded import embedded_dsn; "
        "print(embedded_dsn(Path(sys.argv[1]), keep_running=False))"
    )
    command = [sys.executable, "-c", code, str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("postgresql://"), done.stdout
    assert (data_dir / "PG_VERSION").exists(), "the data stays"
    assert not (data_dir / "postmaster.pid").exists(), "the server stopped"


def test_the_documented_way_to_stop_the_embedded_server_stops_it(data_dir: Path) -> None:
    """docs/install.md's commands, with this test's data directory, stop the server the
    CLI started (run as root, through the runuser form the page gives)."""
    started = cli_process(["migrate"], {"FAIRSCHED_DATA_DIR": str(data_dir)})
    assert started.returncode == 0, started.stderr
    pid = postmaster_pid(data_dir)
    page = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    block = page.split("```sh\nPG_CTL=", 1)[1].split("```", 1)[0]
    define, stop = ("PG_CTL=" + block).strip().splitlines()
    if os.geteuid() == 0:
        stop = page.split("`runuser ", 1)[1].split("`", 1)[0].replace("\n", " ")
        stop = "runuser " + stop
    default = "~/.local/share/fairsched/pgdata"
    script = "\n".join(
        [define.replace(".venv/bin/python", sys.executable), stop.replace(default, str(data_dir))]
    )
    done = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)
