"""Databases of the test server: copies of a template, made and dropped by name.

``CREATE DATABASE … TEMPLATE`` and ``DROP DATABASE`` each take a good part of a second on
a busy server, and most tests need a database of their own: :class:`Copies` makes the
next copy while a test runs and drops the copies of finished tests behind them, each on
a thread of its own, so a test waits for neither.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from fairsched.testing.databases import database_create, database_drop, with_database

DB_PREFIX = "fairsched_test_"
"""Every database the tests make is named with it."""


@contextmanager
def database_copy(server_dsn: str, template: str | None = None) -> Iterator[str]:
    """DSN of a new database (a copy of ``template`` when given), dropped on exit."""
    name = database_create(server_dsn, template=template, prefix=DB_PREFIX)
    try:
        yield with_database(server_dsn, name)
    finally:
        database_drop(server_dsn, name)


DROPS_BEHIND = 32
"""Copies a process may leave to drop: fast tests must not pile up databases on the server."""


class Copies:
    """Copies of ``template``, one made ahead of the test that takes it (on a thread of
    its own), dropped behind the test that gives it back (on another)."""

    def __init__(self, server_dsn: str, template: str) -> None:
        self._server = server_dsn
        self._template = template
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="test-db-maker")
        self._dropper = ThreadPoolExecutor(1, thread_name_prefix="test-db-dropper")
        self._next: Future[str] | None = None
        self._drops: deque[Future[None]] = deque()

    def _make(self) -> Future[str]:
        return self._maker.submit(database_create, self._server, template=self._template, prefix=DB_PREFIX)

    def take(self) -> str:
        """The name of a new copy, the caller's own; the next one is started."""
        self._next = self._next or self._make()
        try:
            name = self._next.result()
        except Exception:  # reaches this test; the next take tries anew
            self._next = None
            raise
        self._next = self._make()
        return name

    def give_back(self, name: str) -> None:
        """Drop copy ``name`` (sessions still on it are ended), without waiting for it
        unless :data:`DROPS_BEHIND` drops are still to finish (then for the oldest; its
        failure reaches this test)."""
        self._drops.append(self._dropper.submit(database_drop, self._server, name))
        while len(self._drops) > DROPS_BEHIND:
            self._drops.popleft().result()

    def close(self) -> None:
        """Drop the copy made ahead and wait for every drop; raise the first that failed."""
        if self._next is not None and self._next.exception() is None:
            self.give_back(self._next.result())
        self._maker.shutdown()
        self._dropper.shutdown()
        failed = [e for e in (drop.exception() for drop in self._drops) if e is not None]
        if failed:
            raise failed[0]
