"""Enqueue: validate jobs, then insert a batch in one statement (with NOTIFY when enabled)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fairsched.db import operation
from fairsched.errors import InvalidInput, PayloadTooLarge, UnknownQueue
from fairsched.sql import QUERIES

QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")
MAX_TENANT_CHARS = 128
MAX_KEY_CHARS = 256
INT32 = 2**31 - 1
INT64 = 2**63 - 1


@dataclass(frozen=True)
class JobSpec:
    """One job to enqueue."""

    payload: Any
    tenant: str
    priority: int = 0
    aggregate_key: str | None = None
    aggregate_seq: int | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None


def check_queue_name(queue: str) -> str:
    """Refuse names that are not plain identifiers-with-punctuation."""
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise InvalidInput(f"invalid queue name {queue!r}: use 1-63 letters, digits, '_', '.', ':' or '-'")
    return queue


def check_label(kind: str, value: str, max_chars: int) -> str:
    """Tenants, aggregate and idempotency keys: non-empty printable text, bounded."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{kind} must be a non-empty string")
    if len(value) > max_chars:
        raise InvalidInput(f"{kind} is {len(value)} characters; the limit is {max_chars}")
    if any(unicodedata.category(ch) in ("Cc", "Cs", "Cn") for ch in value):
        raise InvalidInput(f"{kind} {value[:40]!r} contains control or unassigned characters")
    return value


def _check_int(kind: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{kind} must be an integer in [{low}, {high}], got {value!r}")


def encode_payload(payload: Any, max_bytes: int) -> str:
    """The payload as JSON text, refused when not JSON or larger than ``max_bytes``."""
    try:
        text = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise InvalidInput(f"payload is not JSON-serialisable: {e}") from None
    if "\\u0000" in text:
        raise InvalidInput("payload contains a NUL character, which PostgreSQL jsonb cannot store")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise PayloadTooLarge(f"payload is {size} bytes; the limit is {max_bytes} bytes")
    return text


def validate(job: JobSpec, max_payload_bytes: int) -> str:
    """Check every field of ``job``; returns its payload as JSON text."""
    check_label("tenant", job.tenant, MAX_TENANT_CHARS)
    _check_int("priority", job.priority, -INT32, INT32)
    if (job.aggregate_key is None) != (job.aggregate_seq is None):
        raise InvalidInput("aggregate_key and aggregate_seq are given together or not at all")
    if job.aggregate_key is not None:
        check_label("aggregate_key", job.aggregate_key, MAX_KEY_CHARS)
        _check_int("aggregate_seq", job.aggregate_seq, 0, INT64)
    if job.max_attempts is not None:
        _check_int("max_attempts", job.max_attempts, 1, 1000)
    if job.idempotency_key is not None:
        check_label("idempotency_key", job.idempotency_key, MAX_KEY_CHARS)
    if job.run_at is not None and (not isinstance(job.run_at, datetime) or job.run_at.tzinfo is None):
        raise InvalidInput("run_at must be a timezone-aware datetime")
    return encode_payload(job.payload, max_payload_bytes)


def jobs_enqueue(
    conn: psycopg.Connection, queue: str, jobs: Sequence[JobSpec], *, max_payload_bytes: int
) -> list[int]:
    """Insert ``jobs`` on ``queue`` in one statement; one id per job, in order.

    Runs on ``conn`` as it is: inside the caller's transaction when there is one.
    """
    check_queue_name(queue)
    checked = list(jobs)
    payloads = [validate(job, max_payload_bytes) for job in checked]
    if not checked:
        return []
    params = {
        "queue": queue,
        "tenants": [j.tenant for j in checked],
        "payloads": [Jsonb(text, dumps=_identity) for text in payloads],
        "priorities": [j.priority for j in checked],
        "aggregate_keys": [j.aggregate_key for j in checked],
        "aggregate_seqs": [j.aggregate_seq for j in checked],
        "run_ats": [j.run_at for j in checked],
        "max_attempts": [j.max_attempts for j in checked],
        "idempotency_keys": [j.idempotency_key for j in checked],
    }
    with operation("jobs_enqueue"):
        rows = conn.execute(QUERIES["jobs_enqueue"], params).fetchall()
        if not rows:
            raise UnknownQueue(queue)
        ids: list[int | None] = [row[0] for row in rows]
        missing = [i for i, job_id in enumerate(ids) if job_id is None]
        if missing:
            # Keys inserted by a concurrent transaction or twice in this batch.
            found = conn.execute(
                QUERIES["jobs_find_by_idempotency_key"],
                {
                    "queue": queue,
                    "tenants": [checked[i].tenant for i in missing],
                    "idempotency_keys": [checked[i].idempotency_key for i in missing],
                },
            ).fetchall()
            for ord_, job_id in found:
                ids[missing[ord_ - 1]] = job_id
    if any(job_id is None for job_id in ids):
        raise InvalidInput("an idempotency key collided with a job that is not visible yet; retry")
    return [job_id for job_id in ids if job_id is not None]


def _identity(text: str) -> str:
    return text
