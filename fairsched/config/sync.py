"""Configuration from a TOML file into the database: check, apply (and prune), live
changes (:mod:`fairsched.config.compare` diffs and exports).

The database is the runtime source of truth; a file is applied to it. Per queue
the database stores the fields of :data:`STORED_FIELDS` and, per tenant, a weight
and a cap (``fairsched.tenant_shares``). Tenants come from two places in a file:

- ``[queues.<q>.tenants.<t>]``: that queue only;
- ``[tenants.<t>]``: every queue whose policy stack orders tenants (``weighted``),
  unless the queue lists the tenant itself (the queue's entry wins as a whole).

A cap is refused on a queue whose stack enforces no caps (its tenant order does not:
:func:`~fairsched.policy.owned.caps_enforced`), and so is a new stack that enforces none
on a queue whose tenants still have caps: the error names them, nothing changes.

The settings policies own (``rate``, ``aging_interval_seconds``, ...) live where their
policies keep them (:mod:`fairsched.config.policysettings`).

A tenant the database does not list weighs 1 and has no cap, so an inherited
default is written only where the database holds something else. Applying deletes
nothing unless asked to prune (:func:`prune_plan`): queues and tenant settings absent
from the file stay; ``diff`` shows them.

A change of a setting a policy owns, however made, is handed to every installed policy
once it commits (``reconfigured``): the aging policy re-keys the jobs the queue already
holds for a new ``aging_interval_seconds``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from fairsched.config.policysettings import (
    Changed,
    Reconfigured,
    settings_reconfigured,
    values_apply,
    values_declare,
    with_values,
)
from fairsched.db.connection import idle, operation
from fairsched.db.sql import QUERIES
from fairsched.engine.stackfunctions import stack_functions_install
from fairsched.errors import ConfigError, InvalidInput, UnknownQueue
from fairsched.policy.owned import caps_enforced, caps_enforcers, given_fields
from fairsched.policy.registry import forget_stacks, resolve, stack_tenant_order
from fairsched.settings import QueueSettings, Settings, TenantSettings

STORED_FIELDS = (
    "lease_seconds",
    "max_runtime_seconds",
    "max_attempts",
    "unknown_max_attempts",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "notify",
    "policies",
    "policy_params",
    "finished_retention_seconds",
    "dead_retention_seconds",
    "history_retention_seconds",
)
"""The queue settings kept in ``fairsched.queues`` (the rest only configure processes)."""

DEFAULT_TENANT = TenantSettings()

STACK = "policies"
"""The name a changed policy stack is handed to the policies under (``reconfigured``)."""


def orders_tenants(queue: QueueSettings) -> bool:
    """Whether the queue's stack shares claims across tenants (raises on unknown policies)."""
    return stack_tenant_order(queue.policies) is not None


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
    from fairsched.config.schedules import schedules_check  # it builds on this module

    try:
        schedules_check(settings)
    except InvalidInput as e:
        raise ConfigError(f"{where}: {e}") from None


def shown(value: Any) -> str:
    """A setting as ``config diff`` and prune listings print it."""
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


def same(a: Any, b: Any) -> bool:
    """Equal settings (floats within rounding)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    return bool(a == b)


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
    return with_values(conn, {row["name"]: stored_row(row, by_queue.get(row["name"], {})) for row in rows})


def stored_row(
    row: Mapping[str, Any], tenants: Mapping[str, TenantSettings], *, checked: bool = True
) -> QueueSettings:
    """A queue's settings from its row of ``fairsched.queues`` (without the values of the
    settings policies own)."""
    values = {key: row[key] for key in STORED_FIELDS}
    return QueueSettings.stored(row["name"], {**values, "tenants": dict(tenants)}, checked=checked)


def queue_settings(conn: psycopg.Connection, name: str) -> QueueSettings:
    """One queue's stored settings (tenants included); :class:`UnknownQueue` if undeclared."""
    found = database_settings(conn).get(name)
    if found is None:
        raise UnknownQueue(name)
    return found


# -- apply ---------------------------------------------------------------------


def queues_declare(
    conn: psycopg.Connection, queues: Mapping[str, QueueSettings], *, caps_checked: bool = True
) -> Changed:
    """Upsert queues in one transaction. A queue whose stack orders tenants gets share
    rows for the tenants already waiting in it, so a backlog queued under another
    stack is claimed at once after a switch. A new stack that enforces no caps on a queue
    whose tenants have caps is refused (:func:`caps_kept`; ``caps_checked=False``: the
    caller checks once its own changes are made).

    Returns the settings policies own whose stored value changed, by queue (``policies``
    for a queue whose stack changed). They are
    handed to the policies after the commit when ``conn`` was not in a transaction;
    inside the caller's transaction, the caller calls
    :func:`~fairsched.config.policysettings.settings_reconfigured` once it committed.
    """
    outermost = idle(conn)
    with conn.transaction():
        with operation("configsync_queue_stacks"):
            rows = conn.execute(QUERIES["configsync_queue_stacks"], {"names": list(queues)}).fetchall()
        restacked = {name for name, stack in rows if list(stack) != list(queues[name].policies)}
        for name, queue in queues.items():
            with operation("queue_upsert"):
                conn.execute(QUERIES["queue_upsert"], {"name": name, **queue.model_dump()})
            stack_functions_install(conn, tuple(queue.policies))
            if orders_tenants(queue):
                with operation("configsync_pending_tenants"):
                    rows = conn.execute(QUERIES["configsync_pending_tenants"], {"name": name}).fetchall()
                for policy in resolve(queue.policies):
                    policy.pending(conn, name, [(r[0], r[1]) for r in rows])
        changed = values_declare(conn, queues)
        for name in restacked:
            changed.setdefault(name, set()).add(STACK)
        if caps_checked:
            caps_kept(conn, {name: queues[name].policies for name in restacked})
    forget_stacks()
    if outermost:
        settings_reconfigured(conn, changed)
    return changed


def caps_kept(conn: psycopg.Connection, stacks: Mapping[str, list[str]]) -> None:
    """Refuse the new policy ``stacks`` of queues that enforce no caps while tenants of
    theirs have caps, naming the caps to remove first (caps are refused, never dropped)."""
    unenforced = [name for name, policies in stacks.items() if not caps_enforced(policies)]
    if not unenforced:
        return
    with operation("configsync_tenant_caps"):
        rows = conn.execute(QUERIES["configsync_tenant_caps"], {"names": unenforced}).fetchall()
    capped: dict[str, list[str]] = {}
    for queue, tenant, cap in rows:
        capped.setdefault(queue, []).append(f"{tenant} (cap {cap})")
    if capped:
        raise InvalidInput(
            "; ".join(
                f"queue {q}: the policy stack [{', '.join(stacks[q])}] enforces no caps, but tenants "
                f"{', '.join(tenants)} have caps: remove them first (`fairsched tenant cap {q} TENANT none`) "
                f"or keep {caps_enforcers()} in its policies"
                for q, tenants in sorted(capped.items())
            )
            + "; nothing changed"
        )


def queue_declare(conn: psycopg.Connection, name: str, given: QueueSettings) -> QueueSettings:
    """Declare one queue from the fields ``given`` was built with: a new queue takes the
    defaults for the rest, an existing one keeps its stored values for them (its policy
    stack, tenants and parameters included). Returns the settings now stored."""
    outermost = idle(conn)
    with conn.transaction():
        stored = database_settings(conn).get(name)
        extra = given.model_extra or {}
        explicit = {f: extra[f] if f in extra else getattr(given, f) for f in given_fields(given)}
        merged = given if stored is None else stored.model_copy(update=explicit)
        changed = queues_declare(conn, {name: merged})
    if outermost:
        settings_reconfigured(conn, changed)
    return merged


@dataclass(frozen=True)
class Removal:
    """A queue, or a queue's tenant settings, that ``config apply --prune`` removes."""

    key: str
    detail: str = ""

    def line(self, *, done: bool) -> str:
        """``removed queues.old`` / ``would remove queues.mail.tenants.x (weight 2, cap none)``."""
        text = f"{'removed' if done else 'would remove'} {self.key}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True)
class Applied:
    """What :func:`apply` did: what it pruned, and per queue the settings policies own that
    changed, with the jobs the policies changed after them."""

    removed: list[Removal]
    reconfigured: dict[str, Reconfigured]


UNFINISHED = ("waiting", "pending", "running", "dead")
"""Job states that keep a queue from being pruned, even with ``force``."""


@dataclass(frozen=True)
class _PrunePlan:
    queues: list[str]
    tenants: list[tuple[str, str]]
    removals: list[Removal]


def prune_plan(conn: psycopg.Connection, settings: Settings, *, force: bool = False) -> list[Removal]:
    """What ``config apply --prune`` would remove (read only); raises :class:`InvalidInput`
    naming every queue it would refuse, as the real run does. Schedules absent from the
    file come first: they go before the queues."""
    from fairsched.config.schedules import schedules_prune_plan  # it builds on this module

    return schedules_prune_plan(conn, settings) + _prune_plan(conn, settings, force=force).removals


def _prune_plan(conn: psycopg.Connection, settings: Settings, *, force: bool) -> _PrunePlan:
    """Queues absent from the file, and tenants whose non-default settings a queue of the
    file no longer gives; refuses queues that hold jobs (see :data:`UNFINISHED`)."""
    database = database_settings(conn)
    gone = sorted(set(database) - set(settings.queues))
    counts: dict[str, dict[str, int]] = {}
    if gone:
        with operation("configsync_queue_jobs"):
            for queue, status, count in conn.execute(
                QUERIES["configsync_queue_jobs"], {"names": gone}
            ).fetchall():
                counts.setdefault(queue, {})[status] = count
    refusals = [_refusal(q, counts[q], force=force) for q in gone if q in counts]
    if any(refusals):
        raise InvalidInput("; ".join(r for r in refusals if r) + "; nothing changed")
    removals = []
    for queue in gone:
        kept = sum(counts.get(queue, {}).values())
        removals.append(Removal(f"queues.{queue}", f"{kept} finished jobs kept" if kept else ""))
    tenants = []
    for name, wanted in sorted(settings.queues.items()):
        stored = database.get(name)
        if stored is None:
            continue
        given = effective_tenants(settings, wanted)
        for tenant, share in sorted(stored.tenants.items()):
            if tenant not in given and (share.weight, share.cap) != (1.0, None):  # not just a policy's
                tenants.append((name, tenant))
                removals.append(Removal(f"queues.{name}.tenants.{tenant}", shown(share)))
    return _PrunePlan(gone, tenants, removals)


def _refusal(queue: str, counts: Mapping[str, int], *, force: bool) -> str:
    """Why ``queue`` may not go ('' when it may): it holds unfinished or dead jobs, or
    finished ones without ``force``."""
    total = sum(counts.values())
    held = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    text = f"queue {queue} holds {total} job{'s' if total != 1 else ''} ({held})"
    if any(counts.get(status) for status in UNFINISHED):
        return (
            f"{text}: drain it, and replay or discard its dead jobs, before pruning it "
            "(--force never removes unfinished or dead jobs)"
        )
    if not force:
        return (
            f"{text}: prune it once retention has deleted them, or --force to remove the queue "
            "and keep those rows (retention no longer visits them)"
        )
    return ""


def _prune(conn: psycopg.Connection, plan: _PrunePlan) -> None:
    """Remove the planned queues with their fairness state, and the planned tenants'
    settings: an idle tenant's share row goes, a busy one's goes back to the defaults."""
    with operation("configsync_prune"):
        if plan.queues:
            conn.execute(QUERIES["configsync_queues_remove"], {"names": plan.queues})
        if plan.tenants:
            params = {"queues": [q for q, _t in plan.tenants], "tenants": [t for _q, t in plan.tenants]}
            conn.execute(QUERIES["configsync_tenants_remove_idle"], params)
            conn.execute(QUERIES["configsync_tenants_reset"], params)


def apply(
    conn: psycopg.Connection, settings: Settings, *, prune: bool = False, force: bool = False
) -> Applied:
    """Write every queue of ``settings`` with its tenants, then its schedules
    (:mod:`fairsched.config.schedules`), in one transaction; with ``prune``, remove in
    the same transaction what left the file (:func:`prune_plan`: a refused queue
    changes nothing at all).

    Running workers see the change on their next claims (their stack cache lives
    one second) and are woken by a notification on each queue. The settings policies own
    that changed are handed to the policies after the commit (a new aging interval
    re-keys the queued jobs).
    """
    from fairsched.config.schedules import schedules_apply  # it builds on this module

    inherited: list[tuple[str, str, TenantSettings]] = []
    for name, queue in settings.queues.items():
        if orders_tenants(queue):
            inherited += [(name, t, ts) for t, ts in settings.tenants.items() if t not in queue.tenants]
    outermost = idle(conn)
    with conn.transaction(), operation("configsync_apply"):
        plan = _prune_plan(conn, settings, force=force) if prune else None
        changed = queues_declare(conn, settings.queues, caps_checked=False)
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
        for name, names in values_apply(conn, settings).items():
            changed.setdefault(name, set()).update(names)
        removed = schedules_apply(conn, settings, prune=prune)  # before the queues they name
        if plan is not None:
            _prune(conn, plan)
            removed += plan.removals
        restacked = {name: settings.queues[name].policies for name, c in changed.items() if STACK in c}
        caps_kept(conn, restacked)  # after the prune: the tenants it removes have no caps left
        for name in settings.queues:
            conn.execute(QUERIES["configsync_queue_notify"], {"name": name})
    forget_stacks()
    return Applied(removed, settings_reconfigured(conn, changed) if outermost else {})
