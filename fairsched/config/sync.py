"""Configuration between a TOML file and the database: apply, diff, export, live changes.

The database is the runtime source of truth; a file is applied to it. Per queue
the database stores the fields of :data:`STORED_FIELDS` and, per tenant, a weight
and a cap (``fairsched.tenant_shares``). Tenants come from two places in a file:

- ``[queues.<q>.tenants.<t>]``: that queue only;
- ``[tenants.<t>]``: every queue whose policy stack orders tenants (``weighted``),
  unless the queue lists the tenant itself (the queue's entry wins as a whole).

A tenant the database does not list weighs 1 and has no cap, so an inherited
default is written only where the database holds something else. Applying never
deletes: queues and tenant settings absent from the file stay; ``diff`` shows them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from pydantic import ValidationError

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import MAX_TENANT_CHARS, check_label, check_queue_name
from fairsched.engine.settle import tenants_activate
from fairsched.errors import ConfigError, InvalidInput, UnknownQueue
from fairsched.policy.registry import forget_stacks, queue_stack, resolve, tenant_share_set
from fairsched.settings import QueueSettings, Settings, TenantSettings, describe_validation_error

STORED_FIELDS = (
    "lease_seconds",
    "max_runtime_seconds",
    "max_attempts",
    "unknown_max_attempts",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "notify",
    "policies",
    "aging_interval_seconds",
    "charge",
    "tenant_cap",
    "serial_gap",
    "serial_poison",
    "policy_params",
)
"""The queue settings kept in ``fairsched.queues`` (the rest only configure processes)."""

DEFAULT_TENANT = TenantSettings()


def orders_tenants(queue: QueueSettings) -> bool:
    """Whether the queue's stack shares claims across tenants (raises on unknown policies)."""
    return any(p.orders_tenants for p in resolve(queue.policies))


def effective_tenants(settings: Settings, queue: QueueSettings) -> dict[str, TenantSettings]:
    """The tenants a file gives one queue: its own, over the top-level ones when weighted."""
    inherited = settings.tenants if orders_tenants(queue) else {}
    return {**inherited, **queue.tenants}


def check(settings: Settings, where: str) -> None:
    """Refuse what the settings model cannot see: unknown policies and impossible stacks."""
    for name, queue in sorted(settings.queues.items()):
        try:
            resolve(queue.policies)
        except ConfigError as e:
            raise ConfigError(f"{where}: queues.{name}.policies: {e}") from None


# -- reading the database ----------------------------------------------------


def database_settings(conn: psycopg.Connection) -> dict[str, QueueSettings]:
    """Every declared queue as the database holds it, with its non-default tenants."""
    with operation("configsync_read"), conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(QUERIES["configsync_queues"]).fetchall()
        tenants = cur.execute(QUERIES["configsync_tenants"]).fetchall()
    by_queue: dict[str, dict[str, TenantSettings]] = {}
    for row in tenants:
        by_queue.setdefault(row["queue_name"], {})[row["tenant"]] = TenantSettings(
            weight=row["weight"], cap=row["cap"]
        )
    return {row["name"]: _stored(row, by_queue.get(row["name"], {})) for row in rows}


def _stored(row: Mapping[str, Any], tenants: Mapping[str, TenantSettings]) -> QueueSettings:
    values = {key: row[key] for key in STORED_FIELDS}
    return QueueSettings.model_validate({**values, "tenants": dict(tenants)})


def queue_settings(conn: psycopg.Connection, name: str) -> QueueSettings:
    """One queue's stored settings (tenants included); :class:`UnknownQueue` if undeclared."""
    found = database_settings(conn).get(name)
    if found is None:
        raise UnknownQueue(name)
    return found


# -- apply ---------------------------------------------------------------------


def queues_declare(conn: psycopg.Connection, queues: Mapping[str, QueueSettings]) -> None:
    """Upsert queues in one transaction. A queue whose stack orders tenants gets share
    rows for the tenants already waiting in it, so a backlog queued under another
    stack is claimed at once after a switch."""
    with conn.transaction():
        for name, queue in queues.items():
            with operation("queue_upsert"):
                conn.execute(QUERIES["queue_upsert"], {"name": name, **queue.model_dump()})
            if orders_tenants(queue):
                with operation("configsync_pending_tenants"):
                    rows = conn.execute(QUERIES["configsync_pending_tenants"], {"name": name}).fetchall()
                tenants_activate(conn, name, [r[0] for r in rows], [r[1] for r in rows])
    forget_stacks()


def queue_declare(conn: psycopg.Connection, name: str, given: QueueSettings) -> QueueSettings:
    """Declare one queue from the fields ``given`` was built with: a new queue takes the
    defaults for the rest, an existing one keeps its stored values for them (its policy
    stack, tenants and parameters included). Returns the settings now stored."""
    with conn.transaction():
        stored = database_settings(conn).get(name)
        explicit = {field: getattr(given, field) for field in given.model_fields_set}
        merged = given if stored is None else stored.model_copy(update=explicit)
        queues_declare(conn, {name: merged})
    return merged


def apply(conn: psycopg.Connection, settings: Settings) -> None:
    """Write every queue of ``settings`` with its tenants, in one transaction.

    Running workers see the change on their next claims (their stack cache lives
    one second) and are woken by a notification on each queue.
    """
    inherited: list[tuple[str, str, TenantSettings]] = []
    for name, queue in settings.queues.items():
        if orders_tenants(queue):
            inherited += [(name, t, ts) for t, ts in settings.tenants.items() if t not in queue.tenants]
    with conn.transaction(), operation("configsync_apply"):
        queues_declare(conn, settings.queues)
        if inherited:
            conn.execute(
                QUERIES["configsync_tenant_defaults_apply"],
                {
                    "queues": [q for q, _t, _s in inherited],
                    "tenants": [t for _q, t, _s in inherited],
                    "weights": [s.weight for _q, _t, s in inherited],
                    "caps": [s.cap for _q, _t, s in inherited],
                },
            )
        for name in settings.queues:
            conn.execute(QUERIES["configsync_queue_notify"], {"name": name})
    forget_stacks()


# -- diff ------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One setting that differs: ``file`` and ``database`` are ``None`` where absent."""

    key: str
    file: Any
    database: Any
    note: str = ""

    def line(self) -> str:
        """``queues.emails.lease_seconds: file 30 | database 60``."""
        text = f"{self.key}: file {_shown(self.file)} | database {_shown(self.database)}"
        return f"{text} ({self.note})" if self.note else text


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, TenantSettings):
        cap = "none" if value.cap is None else value.cap
        return f"weight {_number(value.weight)}, cap {cap}"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def diff(settings: Settings, database: Mapping[str, QueueSettings]) -> list[Difference]:
    """What differs between the file's queues and tenants and the database's."""
    found: list[Difference] = []
    for name in sorted(set(settings.queues) | set(database)):
        key = f"queues.{name}"
        wanted, stored = settings.queues.get(name), database.get(name)
        if wanted is None:
            found.append(Difference(key, None, "declared", "config apply keeps it"))
            continue
        if stored is None:
            found.append(Difference(key, "declared", None, "config apply declares it"))
            continue
        for field in STORED_FIELDS:
            mine, theirs = getattr(wanted, field), getattr(stored, field)
            if not _same(mine, theirs):
                found.append(Difference(f"{key}.{field}", mine, theirs))
        found += _tenant_differences(key, effective_tenants(settings, wanted), stored.tenants)
    return found


def _tenant_differences(
    key: str, wanted: Mapping[str, TenantSettings], stored: Mapping[str, TenantSettings]
) -> list[Difference]:
    found = []
    for tenant in sorted(set(wanted) | set(stored)):
        mine, theirs = wanted.get(tenant), stored.get(tenant)
        if mine is None:
            found.append(Difference(f"{key}.tenants.{tenant}", None, theirs, "config apply keeps it"))
        elif not _same_tenant(mine, theirs or DEFAULT_TENANT):
            found.append(Difference(f"{key}.tenants.{tenant}", mine, theirs or DEFAULT_TENANT))
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    return bool(a == b)


def _same_tenant(a: TenantSettings, b: TenantSettings) -> bool:
    return _same(a.weight, b.weight) and a.cap == b.cap


# -- export ------------------------------------------------------------------------


def export_toml(database: Mapping[str, QueueSettings], *, now: datetime | None = None) -> str:
    """The database's queues and tenants as a TOML file that ``config apply`` round-trips."""
    lines = ["# fairsched configuration exported from the database"]
    if now is not None:
        lines[0] += f" at {now.isoformat(timespec='seconds')}"
    lines.append("# Apply with: fairsched config apply FILE")
    for name, queue in sorted(database.items()):
        lines += ["", f"[queues.{toml_key(name)}]"]
        for field in STORED_FIELDS:
            value = getattr(queue, field)
            if value is None:
                continue
            lines.append(f"{field} = {toml_value(value)}")
        for tenant, share in sorted(queue.tenants.items()):
            lines += ["", f"[queues.{toml_key(name)}.tenants.{toml_key(tenant)}]"]
            lines.append(f"weight = {toml_value(share.weight)}")
            if share.cap is not None:
                lines.append(f"cap = {share.cap}")
    return "\n".join(lines) + "\n"


def toml_key(key: str) -> str:
    """A TOML key: bare when it can be, else a quoted basic string.

    >>> toml_key("emails"), toml_key("a.b"), toml_key('x"y')
    ('emails', '"a.b"', '"x\\\\"y"')
    """
    if key and all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in key):
        return key
    return toml_string(key)


def toml_string(text: str) -> str:
    """A TOML basic string, escaping quotes, backslashes and control characters."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """A TOML value: bool, int, float, string, list, or inline table of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no TOML form fairsched accepts")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"{type(value).__name__} has no TOML form")


# -- live changes of one queue ---------------------------------------------------------


def queue_settings_set(
    conn: psycopg.Connection, name: str, changes: Mapping[str, Any]
) -> tuple[QueueSettings, QueueSettings]:
    """Change stored settings of one queue; returns (before, after).

    Validated like the config file; the policy stack must resolve. Adding or
    removing ``serial`` needs a queue without waiting, pending or running jobs;
    a stack that starts ordering tenants brings the tenants with pending work
    into the weighted selection in the same transaction.
    """
    unknown = sorted(set(changes) - set(STORED_FIELDS))
    if unknown:
        raise InvalidInput(f"not a stored queue setting: {', '.join(unknown)}")
    with conn.transaction():
        with operation("configsync_queue_lock"), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(QUERIES["configsync_queue_lock"], {"name": name}).fetchone()
        if row is None:
            raise UnknownQueue(name)
        before = _stored(row, {})
        try:
            after = QueueSettings.model_validate({**{k: row[k] for k in STORED_FIELDS}, **changes})
        except ValidationError as e:
            raise InvalidInput(f"queue {name}: {describe_validation_error(e)}") from None
        try:
            old_stack, new_stack = resolve(before.policies), resolve(after.policies)
        except ConfigError as e:
            raise InvalidInput(f"queue {name}: {e}") from None
        if any(p.serial for p in old_stack) != any(p.serial for p in new_stack):
            busy = conn.execute(QUERIES["configsync_queue_busy"], {"name": name}).fetchone()
            if busy is not None and busy[0]:
                raise InvalidInput(
                    f"queue {name} has jobs waiting, pending or running: add or remove the serial "
                    "policy only on a drained queue"
                )
        queues_declare(conn, {name: after})
        conn.execute(QUERIES["configsync_queue_notify"], {"name": name})
    forget_stacks()
    return before, after


def changed_fields(before: QueueSettings, after: QueueSettings) -> Iterable[tuple[str, Any, Any]]:
    """The stored fields that differ: (field, before, after)."""
    for field in STORED_FIELDS:
        old, new = getattr(before, field), getattr(after, field)
        if not _same(old, new):
            yield field, old, new


def tenant_set(
    conn: psycopg.Connection, queue: str, tenant: str, *, weight: float | None = None, cap: int | None = None
) -> str:
    """Set a tenant's weight and/or cap (``cap=0``: none) and wake the queue's claimers.

    Returns a note for the operator when the queue's stack does not use the value.
    """
    check_queue_name(queue)
    check_label("tenant", tenant, MAX_TENANT_CHARS)
    with conn.transaction():
        tenant_share_set(conn, queue, tenant, weight=weight, cap=cap)
        conn.execute(QUERIES["configsync_queue_notify"], {"name": queue})
    if queue_stack(conn, queue).weighted:
        return ""
    return f" (stored; {queue}'s policy stack has no weighted policy, so it does not shape claims yet)"
