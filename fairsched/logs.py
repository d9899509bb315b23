"""Logs: one line per record on stderr, as text or as JSON, and the job a line is about.

:func:`setup` sends the process's :mod:`logging` records to stderr from a level up, in
one of two formats:

- ``text``: ``2024-05-01 12:00:00,123 INFO fairsched.worker.process: worker ... starting``
  (the format the worker has always written);
- ``json``: one object a line with ``time`` (UTC, ISO 8601), ``level``, ``logger`` and
  ``message``; ``exc_info`` holds a traceback when there is one. While a job is in scope
  the line also carries ``job_id``, ``queue``, ``tenant``, ``attempt`` and ``lease_token``.

A job is in scope while its handler runs (in its slot thread, or its task on the event
loop) and while the worker's own code logs about it (:func:`job_scope`): a filter on the
handler (:class:`JobFields`) adds the job's fields to every record logged then, so a
handler's own ``logging`` calls carry them too. Only those fields are taken from the
job: its payload is never logged.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO, get_args

from pythonjsonlogger.json import JsonFormatter

from fairsched.settings import LogFormat, LogLevel

if TYPE_CHECKING:
    from fairsched.engine.lease import Lease

LOG_FORMATS: tuple[str, ...] = get_args(LogFormat)
"""The accepted ``--log-format`` / ``log_format`` values."""
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
"""The accepted ``--log-level`` / ``log_level`` values, lowest first."""
JOB_FIELDS = ("job_id", "queue", "tenant", "attempt", "lease_token")
"""What a line about a job says of it (never its payload)."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_JOB: contextvars.ContextVar[Lease | None] = contextvars.ContextVar("fairsched_log_job", default=None)


@contextmanager
def job_scope(lease: Lease) -> Iterator[None]:
    """Within the block, records logged in this thread (or asyncio task) are about ``lease``'s
    job. Scopes nest; leaving one brings back the one around it."""
    token = _JOB.set(lease)
    try:
        yield
    finally:
        _JOB.reset(token)


def job_in_scope() -> Lease | None:
    """The lease of the job the current thread (or task) logs about, if any."""
    return _JOB.get()


class JobFields(logging.Filter):
    """Adds the fields of the job in scope (:data:`JOB_FIELDS`) to each record; a field the
    record already has (given with ``extra=``) keeps its value. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        lease = _JOB.get()
        if lease is not None:
            fields = record.__dict__
            fields.setdefault("job_id", lease.id)
            fields.setdefault("queue", lease.queue)
            fields.setdefault("tenant", lease.tenant)
            fields.setdefault("attempt", lease.attempt)
            fields.setdefault("lease_token", lease.token)
        return True


class JsonLines(JsonFormatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, then the
    record's extra fields (the job's, from :class:`JobFields`) and ``exc_info``."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """The record's time in UTC, ISO 8601 to the millisecond."""
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def formatter(log_format: LogFormat) -> logging.Formatter:
    """The formatter of ``log_format`` (``text`` or ``json``)."""
    if log_format == "json":
        return JsonLines()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")


def setup(log_format: LogFormat = "text", level: LogLevel = "info") -> None:
    """Log records of ``level`` and up to stderr in ``log_format``.

    Replaces what an earlier call installed, and nothing else: handlers others installed
    stay. In ``json`` Python's warnings go through logging too, so every line is JSON.
    """
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r}: use one of {', '.join(LOG_LEVELS)}")
    root = logging.getLogger()
    previous = _installed(root)
    handler = _Stderr(previous.found_level if previous is not None else root.level)
    handler.setFormatter(formatter(log_format))
    handler.addFilter(JobFields())
    if previous is not None:
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(log_format == "json")


def teardown() -> None:
    """Undo :func:`setup`: remove its handler and bring back the root level it found."""
    root = logging.getLogger()
    handler = _installed(root)
    if handler is not None:
        root.removeHandler(handler)
        root.setLevel(handler.found_level)
        logging.captureWarnings(False)


class _Stderr(logging.StreamHandler[TextIO]):
    """The handler :func:`setup` installs: lines to stderr; knows the root level it found."""

    def __init__(self, found_level: int) -> None:
        super().__init__()
        self.found_level = found_level


def _installed(root: logging.Logger) -> _Stderr | None:
    return next((h for h in root.handlers if isinstance(h, _Stderr)), None)
