"""Enqueue: validate jobs, then insert a batch in one statement, the queue's stack's
enqueue function (:mod:`fairsched.engine.stackstatements`: the policies' columns, NOTIFY
when enabled, the tenant order's activation). A batch with jobs a policy holds back runs
in a transaction: the policy locks and checks them first, and settles them after the
insert."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fairsched import bounds, tracing
from fairsched.db.connection import idle, operation
from fairsched.db.sql import QUERIES
from fairsched.engine.settle import settle_jobs
from fairsched.engine.stackfunctions import STACK_CHANGED, enqueue_function, stack_function_ready
from fairsched.engine.stackstatements import activates_at_enqueue
from fairsched.errors import DatabaseError, InvalidInput, PayloadTooLarge, UnknownQueue
from fairsched.policy import BasePolicy, JobState
from fairsched.policy.registry import QueueStack, forget_stacks, queue_stack

QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")
MAX_TENANT_CHARS = 128
MAX_KEY_CHARS = 256
INT32 = 2**31 - 1
INT64 = 2**63 - 1
_NOW = datetime.min.replace(tzinfo=UTC)
"""A due time that is always past: the job is claimable now."""


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
    if not isinstance(queue, str) or not QUEUE_NAME.fullmatch(queue):
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


_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""``\\u0000`` as JSON writes a NUL: after an even number of backslashes (an odd
number means the backslash itself was escaped and the text is literal)."""


_LONG_DIGITS = re.compile(rf"\d{{{bounds.PAYLOAD_MAX_INT_DIGITS + 1}}}")
_INT_LIMIT = 10**bounds.PAYLOAD_MAX_INT_DIGITS


def payload_too_deep(source: str = "payload") -> InvalidInput:
    """The error of a payload nested deeper than its limit."""
    return InvalidInput(f"{source} nests deeper than {bounds.PAYLOAD_MAX_DEPTH} levels of lists and objects")


def payload_int_too_long(source: str = "payload") -> InvalidInput:
    """The error of a payload holding too long an integer."""
    return InvalidInput(
        f"{source} holds an integer of more than {bounds.PAYLOAD_MAX_INT_DIGITS} digits: send it as a string"
    )


_CONTAINERS = (dict, list, tuple)


def payload_shape_check(payload: Any) -> None:
    """Refuse a payload nested deeper than :data:`~fairsched.bounds.PAYLOAD_MAX_DEPTH` or
    holding an integer of more than :data:`~fairsched.bounds.PAYLOAD_MAX_INT_DIGITS`
    digits (object keys are text in JSON: they are not counted).

    Level by level, without recursion, so any depth is measured; each list or object is
    visited once (a circular one is left to the encoder's own error). The plain types
    are told apart by ``type`` first: this walk costs about what encoding does.
    """
    seen: set[int] = set()
    level = [payload]
    for depth in range(bounds.PAYLOAD_MAX_DEPTH + 1):
        below: list[Any] = []
        for value in level:
            kind = type(value)
            if kind is str or kind is float or kind is bool or value is None:
                continue
            if kind is int or (isinstance(value, int) and not isinstance(value, bool)):
                if not -_INT_LIMIT < value < _INT_LIMIT:
                    raise payload_int_too_long()
            elif isinstance(value, _CONTAINERS):
                if depth == bounds.PAYLOAD_MAX_DEPTH:
                    raise payload_too_deep()
                if id(value) not in seen:
                    seen.add(id(value))
                    below += value.values() if isinstance(value, dict) else value
        if not below:
            return
        level = below


def encode_payload(payload: Any, max_bytes: int) -> str:
    """The payload as JSON text, refused when not JSON, nested too deeply, holding too long
    an integer (:mod:`fairsched.bounds`) or larger than ``max_bytes``.

    The shape is walked only when the text could break a limit (more lists and objects
    than the depth allowed, or a run of too many digits): a cheap scan of the text first.
    """
    try:
        text = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        encoded = text.encode("utf-8")
    except (TypeError, ValueError) as e:  # UnicodeEncodeError (lone surrogates) is a ValueError
        payload_shape_check(payload)  # an integer too long to convert names itself
        raise InvalidInput(f"payload is not JSON-serialisable: {e}") from None
    except RecursionError:
        payload_shape_check(payload)
        raise InvalidInput("payload is nested too deeply to encode") from None
    if text.count("[") + text.count("{") > bounds.PAYLOAD_MAX_DEPTH or _LONG_DIGITS.search(text):
        payload_shape_check(payload)
    if _ESCAPED_NUL.search(text):
        raise InvalidInput("payload contains a NUL character, which PostgreSQL jsonb cannot store")
    size = len(encoded)
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
    if job.run_at is not None:
        check_run_at(job.run_at)
    return encode_payload(job.payload, max_payload_bytes)


def check_run_at(run_at: Any) -> None:
    """A timezone-aware time within :data:`~fairsched.bounds.RUN_AT_PAST` before now and
    :data:`~fairsched.bounds.RUN_AT_FUTURE` after (this process's clock). A past one is
    kept as given: the job is due since then."""
    if not isinstance(run_at, datetime) or run_at.utcoffset() is None:
        raise InvalidInput("run_at must be a timezone-aware datetime")
    now = datetime.now(UTC)
    if not now - bounds.RUN_AT_PAST <= run_at <= now + bounds.RUN_AT_FUTURE:
        raise InvalidInput(
            f"run_at must lie between {_days(bounds.RUN_AT_PAST)} before now and "
            f"{_days(bounds.RUN_AT_FUTURE)} after, got {run_at.isoformat()}"
        )


def _days(span: timedelta) -> str:
    return f"{span.days} day{'s' if span.days != 1 else ''}"


def jobs_enqueue(
    conn: psycopg.Connection, queue: str, jobs: Sequence[JobSpec], *, max_payload_bytes: int
) -> list[int]:
    """Insert ``jobs`` on ``queue`` in one statement, the stack's enqueue function; one id
    per job, in order.

    Runs on ``conn`` as it is: inside the caller's transaction when there is one. A
    queue whose stack changed since this process read it is read again and, outside a
    caller's transaction, the batch is inserted the new stack's way.
    """
    check_queue_name(queue)
    checked = list(jobs)
    payloads = [validate(job, max_payload_bytes) for job in checked]
    if not checked:
        return []
    params: dict[str, object] = {
        "queue": queue,
        "tenants": [j.tenant for j in checked],
        "payloads": [Jsonb(text, dumps=_identity) for text in payloads],
        "priorities": [j.priority for j in checked],
        "aggregate_keys": [j.aggregate_key for j in checked],
        "aggregate_seqs": [j.aggregate_seq for j in checked],
        "run_ats": [j.run_at for j in checked],
        "max_attempts": [j.max_attempts for j in checked],
        "idempotency_keys": [j.idempotency_key for j in checked],
        "trace_context": _jsonb_or_none(tracing.carrier()),
    }
    outermost = idle(conn)
    try:
        return _enqueue(conn, queue_stack(conn, queue), checked, params)
    except DatabaseError as error:
        if STACK_CHANGED not in str(error):
            raise
        forget_stacks()
        if not outermost:
            raise
    return _enqueue(conn, queue_stack(conn, queue), checked, params)


def _enqueue(
    conn: psycopg.Connection, stack: QueueStack, checked: Sequence[JobSpec], params: dict[str, object]
) -> list[int]:
    """The batch inserted the way ``stack`` asks: held jobs locked and checked first and
    settled after, like the pending jobs of a tenant order that does not learn of them in
    the insert itself; the policies' hooks in the same transaction."""
    queue = stack.queue
    holders = [p for p in stack.policies if p.holds]
    held = bool(holders) and any(j.aggregate_key is not None for j in checked)
    activates = not held and activates_at_enqueue(stack.names)
    settled = held or (stack.tenant_ordered and not activates)
    hooked = any(type(p).on_enqueue is not BasePolicy.on_enqueue for p in stack.policies)
    with conn.transaction() if settled or hooked else nullcontext():
        if held:
            for policy in holders:
                policy.hold(conn, queue, checked)
        ids, statuses = _insert(conn, stack, checked, {**params, "activate": activates})
        if settled:
            inserted = [
                JobState(job_id, job.tenant, status, job.aggregate_key, job.run_at or _NOW)
                for job_id, job, status in zip(ids, checked, statuses, strict=True)
                if status is not None
            ]
            settle_jobs(conn, stack, inserted, left_running=False)
        for policy in stack.policies:
            policy.on_enqueue(conn, queue, ids)
    return ids


def _insert(
    conn: psycopg.Connection,
    stack: QueueStack,
    checked: Sequence[JobSpec],
    params: dict[str, Any],
) -> tuple[list[int], list[str | None]]:
    """Ids of the jobs, in order, and the status each was inserted with (``None`` where
    its idempotency key found an existing job)."""
    statement = stack_function_ready(conn, enqueue_function(stack.names))
    with operation("jobs_enqueue"):
        rows = conn.execute(statement, params).fetchall()
        if not rows:
            raise UnknownQueue(stack.queue)
        ids: list[int | None] = [row[0] for row in rows]
        statuses: list[str | None] = [row[3] for row in rows]
        missing = [i for i, job_id in enumerate(ids) if job_id is None]
        if missing:
            # Keys inserted by a concurrent transaction or twice in this batch.
            found = conn.execute(
                QUERIES["jobs_find_by_idempotency_key"],
                {
                    "queue": stack.queue,
                    "tenants": [checked[i].tenant for i in missing],
                    "idempotency_keys": [checked[i].idempotency_key for i in missing],
                },
            ).fetchall()
            for ord_, job_id in found:
                ids[missing[ord_ - 1]] = job_id
    if any(job_id is None for job_id in ids):
        raise InvalidInput("an idempotency key collided with a job that is not visible yet; retry")
    return [job_id for job_id in ids if job_id is not None], statuses


def _identity(text: str) -> str:
    return text


def _jsonb_or_none(value: dict[str, str] | None) -> Jsonb | None:
    return None if value is None else Jsonb(value)
