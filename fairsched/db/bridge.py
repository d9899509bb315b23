"""The engine's operations on psycopg's async connections, without a second copy of them.

Every engine operation is written once, as plain code on a :class:`psycopg.Connection`
(statements from :data:`fairsched.db.sql.QUERIES`, validation in Python).
:func:`run_async` runs such an operation for an ``async`` caller on an
:class:`psycopg.AsyncConnection`: the operation runs in a greenlet and is handed a
:class:`SyncView` of the connection, whose every database call hands its awaitable to
the caller's coroutine, which awaits it on the event loop and passes the result back.
The event loop never blocks, the operation's statements and rules are the sync ones,
and each call runs on the connection as it is: inside the caller's transaction when
there is one. SQLAlchemy's asyncio extension works the same way.

A :class:`SyncView` covers what the engine asks of a connection (``execute``,
``cursor``, ``transaction``, ``info``, ``broken``); policies' transition points and
hooks are given it too, and use no more (``docs/writing-policies.md``).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import greenlet
import psycopg
from psycopg.rows import RowFactory

T = TypeVar("T")


class _Operation(greenlet.greenlet):  # type: ignore[misc]  # greenlet ships no types
    """The greenlet an engine operation runs in; its parent awaits for it."""

    def __init__(self, fn: Callable[[], Any], driver: greenlet.greenlet) -> None:
        super().__init__(fn, driver)
        self.gr_context = driver.gr_context  # the caller's context variables (logs' job scope)


def await_(awaitable: Awaitable[T]) -> T:
    """Inside an operation :func:`run_async` runs: the result of ``awaitable``, awaited by
    the coroutine that runs the operation."""
    current = greenlet.getcurrent()
    if not isinstance(current, _Operation):
        if hasattr(awaitable, "close"):
            awaitable.close()  # never awaited: no "coroutine was never awaited" warning
        raise RuntimeError("a SyncView is used only inside the operation run_async runs")
    return cast(T, current.parent.switch(awaitable))


async def run_async(fn: Callable[[psycopg.Connection], T], conn: psycopg.AsyncConnection[Any]) -> T:
    """Run the engine operation ``fn`` on ``conn``, awaiting each database call on the
    running event loop; returns what ``fn`` returns, raises what it raises."""
    view = cast(psycopg.Connection, SyncView.of(conn))
    operation = _Operation(lambda: fn(view), greenlet.getcurrent())
    result = operation.switch()
    while not operation.dead:
        try:
            value = await result
        except BaseException:
            result = operation.throw(*sys.exc_info())
        else:
            result = operation.switch(value)
    return cast(T, result)


_VIEWS: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], SyncView] = weakref.WeakKeyDictionary()


class SyncView:
    """An :class:`psycopg.AsyncConnection` as the engine's operations use a connection,
    inside :func:`run_async`. One view per connection (:meth:`of`), so what is known
    about a connection (a claim session) stays known; it does not keep it alive."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = weakref.ref(conn)

    @classmethod
    def of(cls, conn: psycopg.AsyncConnection[Any]) -> SyncView:
        """The view of ``conn``."""
        view = _VIEWS.get(conn)
        if view is None:
            view = _VIEWS[conn] = cls(conn)
        return view

    @property
    def connection(self) -> psycopg.AsyncConnection[Any]:
        """The async connection seen."""
        conn = self._conn()
        if conn is None:
            raise RuntimeError("the connection of this view is gone")
        return conn

    @property
    def info(self) -> psycopg.ConnectionInfo:
        return self.connection.info

    @property
    def broken(self) -> bool:
        return self.connection.broken

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> CursorView:
        """Run ``query``; the cursor, to fetch its rows."""
        cursor = CursorView(self, self.connection.cursor())
        return cursor.execute(query, params, **kwargs)

    @contextmanager
    def cursor(self, *, row_factory: RowFactory[Any] | None = None) -> Iterator[CursorView]:
        """A cursor (making rows with ``row_factory``), closed on exit."""
        cursor = self.connection.cursor(row_factory=row_factory) if row_factory else self.connection.cursor()
        try:
            yield CursorView(self, cursor)
        finally:
            await_(cursor.close())

    @contextmanager
    def transaction(self) -> Iterator[psycopg.AsyncTransaction]:
        """A transaction, or a savepoint inside one, as :meth:`psycopg.Connection.transaction`."""
        manager = self.connection.transaction()
        transaction = await_(manager.__aenter__())
        try:
            yield transaction
        except BaseException:
            if not await_(manager.__aexit__(*sys.exc_info())):
                raise
        else:
            await_(manager.__aexit__(None, None, None))


class CursorView:
    """An :class:`psycopg.AsyncCursor` as the engine's operations use a cursor."""

    def __init__(self, connection: SyncView, cursor: psycopg.AsyncCursor[Any]) -> None:
        self.connection = connection
        self._cursor = cursor

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> CursorView:
        await_(self._cursor.execute(query, params, **kwargs))
        return self

    def fetchall(self) -> list[Any]:
        return await_(self._cursor.fetchall())

    def fetchone(self) -> Any:
        return await_(self._cursor.fetchone())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount
