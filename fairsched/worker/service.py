"""A worker's background services: a loop in a daemon thread, stopped on request."""

from __future__ import annotations

import threading
from collections.abc import Callable

Crash = Callable[[BaseException], None]
"""What to do when a service thread dies of an unexpected exception."""


def service_thread(name: str, target: Callable[[], None], on_crash: Crash | None = None) -> threading.Thread:
    """A daemon thread running ``target``; an unexpected exception goes to ``on_crash``."""

    def run() -> None:
        try:
            target()
        except BaseException as e:
            if on_crash is None:
                raise
            on_crash(e)

    return threading.Thread(target=run, name=name, daemon=True)


class Service:
    """Runs :meth:`_run` in a daemon thread from :meth:`start` until :meth:`stop`.

    ``_run`` loops until the ``_stop`` event is set.
    """

    def __init__(self, name: str, on_crash: Crash | None = None) -> None:
        self._stop = threading.Event()
        self._thread = service_thread(name, self._run, on_crash)

    def start(self) -> None:
        """Start the loop in its thread."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end and wait for it."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError
