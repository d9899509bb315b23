"""Live changes of one queue's stored settings (``fairsched policy set``): its own and
those its stack's policies own, checked like the configuration file; and of one tenant's
weight and cap (``fairsched tenant weight|cap``, the dashboard)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row
from pydantic import ValidationError

from fairsched.config.policysettings import queue_values, settings_reconfigured
from fairsched.config.sync import STORED_FIELDS, queues_declare, same, stored_row
from fairsched.db.connection import idle, operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import MAX_TENANT_CHARS, check_label, check_queue_name
from fairsched.errors import ConfigError, InvalidInput, UnknownQueue
from fairsched.policy.owned import owned_effective, owned_settings, stack_settings
from fairsched.policy.registry import forget_stacks, queue_stack, resolve, tenant_share_set
from fairsched.settings import QueueSettings, describe_validation_error


def queue_settings_set(
    conn: psycopg.Connection, name: str, changes: Mapping[str, Any]
) -> tuple[QueueSettings, QueueSettings]:
    """Change stored settings of one queue; returns (before, after).

    Validated like the config file; the policy stack must resolve, and a setting a policy
    owns is refused unless the new stack names that policy. Adding or removing
    ``serial`` needs a queue without waiting, pending or running jobs; a stack that
    starts ordering tenants brings the tenants with pending work into the weighted
    selection in the same transaction. The policies' settings given are handed to the
    policies after the commit (a new aging interval re-keys the queued jobs), even when
    unchanged, so that giving one again finishes an interrupted re-key.
    """
    queue_level = {n for n, o in owned_settings().items() if "queue" in o.setting.levels}
    unknown = sorted(set(changes) - set(STORED_FIELDS) - queue_level)
    if unknown:
        raise InvalidInput(f"not a stored queue setting: {', '.join(unknown)}")
    outermost = idle(conn)
    with conn.transaction():
        with operation("configsync_queue_lock"), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(QUERIES["configsync_queue_lock"], {"name": name}).fetchone()
        if row is None:
            raise UnknownQueue(name)
        before = stored_row(row, {}, checked=False)  # what a repair replaces may be out of range
        before = before.model_copy(update=queue_values(conn, name))
        stack = changes.get("policies", row["policies"])
        kept = queue_values(conn, name, stack if isinstance(stack, list) else row["policies"])
        try:
            after = QueueSettings.model_validate({**{k: row[k] for k in STORED_FIELDS}, **kept, **changes})
        except ValidationError as e:
            raise InvalidInput(f"queue {name}: {describe_validation_error(e)}") from None
        try:
            old_stack, new_stack = resolve(before.policies), resolve(after.policies)
        except ConfigError as e:
            raise InvalidInput(f"queue {name}: {e}") from None
        if any(p.holds for p in old_stack) != any(p.holds for p in new_stack):
            busy = conn.execute(QUERIES["configsync_queue_busy"], {"name": name}).fetchone()
            if busy is not None and busy[0]:
                raise InvalidInput(
                    f"queue {name} has jobs waiting, pending or running: add or remove a policy "
                    "that holds jobs back (such as serial) only on a drained queue"
                )
        changed = queues_declare(conn, {name: after}).get(name, set())
        conn.execute(QUERIES["configsync_queue_notify"], {"name": name})
    forget_stacks()
    if outermost:
        settings_reconfigured(conn, {name: changed | (queue_level & set(changes))})
    return before, after


def changed_fields(before: QueueSettings, after: QueueSettings) -> Iterable[tuple[str, Any, Any]]:
    """The stored fields that differ, then the queue settings the policies of ``after``'s
    stack own: (field, before, after)."""
    for field in STORED_FIELDS:
        old, new = getattr(before, field), getattr(after, field)
        if not same(old, new):
            yield field, old, new
    for owned in stack_settings(after.policies):
        if "queue" in owned.setting.levels:
            old, new = owned_effective(before, owned.name), owned_effective(after, owned.name)
            if not same(old, new):
                yield owned.name, old, new


def tenant_set(
    conn: psycopg.Connection,
    queue: str,
    tenant: str,
    *,
    weight: float | None = None,
    cap: int | None = None,
    by: str = "cli",
) -> str:
    """Set a tenant's weight and/or cap (``cap=0``: none) and wake the queue's claimers;
    ``by`` is who, for the audit trail.

    Returns a note for the operator when the queue's stack does not use the value.
    """
    check_queue_name(queue)
    check_label("tenant", tenant, MAX_TENANT_CHARS)
    with conn.transaction():
        tenant_share_set(conn, queue, tenant, weight=weight, cap=cap, by=by)
        conn.execute(QUERIES["configsync_queue_notify"], {"name": queue})
    if queue_stack(conn, queue).tenant_ordered:
        return ""
    return f" (stored; {queue}'s policy stack orders no tenants, so it does not shape claims yet)"
