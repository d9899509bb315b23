"""A server that accepts a connection and never answers fails a command, not hangs it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def test_a_command_against_a_server_that_never_answers_fails_with_a_clear_error(silent_server: int) -> None:
    """No ``connect_timeout`` in the DSN: fairsched's default ends the wait."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env["FAIRSCHED_DATABASE_URL"] = f"postgresql://nobody@127.0.0.1:{silent_server}/app"
    # The bound only keeps a hanging command from hanging the suite; it asserts no speed.
    done = subprocess.run(
        [sys.executable, "-m", "fairsched", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "cannot reach PostgreSQL" in done.stderr, done.stderr


def test_the_default_connect_timeout_applies_when_the_dsn_sets_none() -> None:
    from fairsched.db.connection import CONNECT_TIMEOUT_SECONDS, with_connect_timeout

    assert f"connect_timeout={CONNECT_TIMEOUT_SECONDS}" in with_connect_timeout("postgresql://h/app")
