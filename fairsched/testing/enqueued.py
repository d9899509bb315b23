"""Assertions on what application code enqueued.

They read ``fairsched.jobs`` on the connection they are given, so inside a test's open
transaction they see its uncommitted enqueues (a :class:`~fairsched.client.Client`
instead reads what is committed). A failed assertion lists the jobs there are instead,
newest first, each payload cut short.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from fairsched.client import Client
from fairsched.testing.queries import QUERIES

PREVIEW_CHARS = 120
"""Longest payload text a failure message shows of one job."""
LISTED_JOBS = 20
"""Most jobs a failure message lists."""

_UNSET: Any = object()
"""``payload`` was not given (``None`` asks for a JSON ``null`` payload)."""


@dataclass(frozen=True)
class EnqueuedJob:
    """A job as the assertion read it from ``fairsched.jobs``."""

    id: int
    queue: str
    tenant: str
    payload: Any
    status: str
    priority: int
    aggregate_key: str | None
    aggregate_seq: int | None
    available_at: datetime
    max_attempts: int
    idempotency_key: str | None


def assert_enqueued(
    *,
    conn: psycopg.Connection[Any] | Client,
    queue: str | None = None,
    tenant: str | None = None,
    payload: Any = _UNSET,
    payload_contains: Any = None,
    priority: int | None = None,
    aggregate_key: str | None = None,
    count: int | None = None,
) -> list[EnqueuedJob]:
    """Assert that jobs matching every filter given are enqueued (any status): at least
    one, or exactly ``count``. Returns the matching jobs, oldest first.

    ``payload`` must equal the job's payload; ``payload_contains`` must be contained in
    it (PostgreSQL's jsonb ``@>``: ``{"order": 1}`` matches ``{"order": 1, "email": …}``).
    """
    filters = {
        "queue": queue,
        "tenant": tenant,
        "payload": None if payload is _UNSET else Jsonb(payload),
        "contains": None if payload_contains is None else Jsonb(payload_contains),
        "priority": priority,
        "aggregate_key": aggregate_key,
    }
    with _connection(conn) as c, c.cursor(row_factory=tuple_row) as cur:
        matched = [EnqueuedJob(*row) for row in cur.execute(QUERIES["testing_jobs_match"], filters)]
        if (len(matched) == count) if count is not None else bool(matched):
            return matched
        given = _describe(queue, tenant, payload, payload_contains, priority, aggregate_key)
        wanted = f" with {given}" if given else ""
        expected = "a job" if count is None else "no job" if count == 0 else f"{count} jobs"
        if matched:
            lines = [_line(j.id, j.queue, j.tenant, j.status, *_cut(_json(j.payload))) for j in matched]
            listed = lines[:LISTED_JOBS] + _more(len(lines))
            raise AssertionError(
                f"expected {expected} enqueued{wanted}; found {len(matched)}:\n" + "\n".join(listed)
            )
        recent = cur.execute(QUERIES["testing_jobs_recent"], {"chars": PREVIEW_CHARS, "limit": LISTED_JOBS})
        rows = recent.fetchall()
    total = rows[0][6] if rows else 0
    listing = [_line(id_, q, t, s, preview, cut) for id_, q, t, s, preview, cut, _ in rows]
    instead = (
        f"enqueued instead ({total}, newest first):\n" + "\n".join(listing + _more(total))
        if rows
        else "no job is enqueued at all (as this connection sees the table)"
    )
    raise AssertionError(f"expected {expected} enqueued{wanted}; none matches; {instead}")


def refute_enqueued(
    *,
    conn: psycopg.Connection[Any] | Client,
    queue: str | None = None,
    tenant: str | None = None,
    payload: Any = _UNSET,
    payload_contains: Any = None,
    priority: int | None = None,
    aggregate_key: str | None = None,
) -> None:
    """Assert that no job matching every filter given is enqueued (see :func:`assert_enqueued`)."""
    assert_enqueued(
        conn=conn,
        queue=queue,
        tenant=tenant,
        payload=payload,
        payload_contains=payload_contains,
        priority=priority,
        aggregate_key=aggregate_key,
        count=0,
    )


@contextmanager
def _connection(conn: psycopg.Connection[Any] | Client) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(conn, Client):
        with conn.connection() as pooled:
            yield pooled
    else:
        yield conn


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _cut(text: str) -> tuple[str, bool]:
    return text[:PREVIEW_CHARS], len(text) > PREVIEW_CHARS


def _line(job_id: int, queue: str, tenant: str, status: str, preview: str, cut: bool) -> str:
    return f"  #{job_id} queue={queue!r} tenant={tenant!r} {status} payload={preview}{'…' if cut else ''}"


def _more(total: int) -> list[str]:
    return [f"  … and {total - LISTED_JOBS} more"] if total > LISTED_JOBS else []


def _describe(
    queue: str | None,
    tenant: str | None,
    payload: Any,
    payload_contains: Any,
    priority: int | None,
    aggregate_key: str | None,
) -> str:
    """The filters given, as ``queue='emails', payload={"to": …}`` (empty: none)."""
    labels = (("queue", queue), ("tenant", tenant))
    parts = [f"{name}={value!r}" for name, value in labels if value is not None]
    for name, value in (("payload", payload), ("payload_contains", payload_contains)):
        if value is not _UNSET and (value is not None or name == "payload"):
            text, cut = _cut(_json(value))
            parts.append(f"{name}={text}{'…' if cut else ''}")
    extra = (("priority", priority), ("aggregate_key", aggregate_key))
    parts += [f"{name}={value!r}" for name, value in extra if value is not None]
    return ", ".join(parts)
