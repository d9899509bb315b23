"""The values of the settings policies own (:mod:`fairsched.policy.owned`), between the
settings models and the policies' tables.

A setting (e.g. ``rate = "50/s"``) is given on a queue, as the default of its tenants
(``[queues.<q>]``), and/or on a tenant (``[queues.<q>.tenants.<t>]``, or a top-level
``[tenants.<t>]`` for every queue whose stack names the owning policy and that does not
list the tenant itself), as its policy declares. It shapes claims only through its
policy, so it is refused on a queue whose stack lacks that policy.

Unlike weights, the file is the whole truth about these values: ``config apply``
removes those a queue of the file no longer gives. Declaring a queue through the API
writes the values it was given and leaves the others alone. The values live in the
policy's table, which exists once ``fairsched migrate`` ran the policy's migrations;
without it there are none to read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg

from fairsched.db.connection import idle, operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import MAX_TENANT_CHARS, check_label, check_queue_name
from fairsched.errors import InvalidInput, NotMigrated, UnknownQueue
from fairsched.policy.owned import (
    Owned,
    given_fields,
    owned_setting,
    owned_settings,
    owned_value,
    stack_settings,
    value_parsed,
)
from fairsched.policy.registry import registry
from fairsched.settings import QueueSettings, Settings, TenantSettings


@dataclass(frozen=True)
class QueueValues:
    """One setting's values on one queue, in their stored form: the queue's default and
    tenants' own (``None``: the tenant has none, or follows the default)."""

    default: Any = None
    tenants: Mapping[str, Any] = field(default_factory=dict)


def present(conn: psycopg.Connection, owned: Owned) -> bool:
    """Whether the setting's table exists (its policy's migrations ran)."""
    with operation("configsync_relation_present"):
        row = conn.execute(
            QUERIES["configsync_relation_present"], {"relation": owned.setting.table}
        ).fetchone()
    return bool(row and row[0])


def _missing(owned: Owned) -> NotMigrated:
    return NotMigrated(
        f"the {owned.policy} policy's table {owned.setting.table} is missing: run `fairsched migrate`"
    )


def stored_values(conn: psycopg.Connection, owned: Owned) -> dict[str, QueueValues]:
    """Every queue's stored values of one setting (none when its table does not exist)."""
    return _read(conn, owned) if present(conn, owned) else {}


def _read(conn: psycopg.Connection, owned: Owned) -> dict[str, QueueValues]:
    with operation("configsync_policy_settings_read"):
        rows = list(owned.setting.read(conn))
    defaults: dict[str, Any] = {}
    tenants: dict[str, dict[str, Any]] = {}
    for queue, tenant, value in rows:
        if value == owned.setting.default:
            continue
        if tenant is None:
            defaults[queue] = value
        else:
            tenants.setdefault(queue, {})[tenant] = value
    return {q: QueueValues(defaults.get(q), tenants.get(q, {})) for q in defaults.keys() | tenants.keys()}


def with_values(conn: psycopg.Connection, queues: dict[str, QueueSettings]) -> dict[str, QueueSettings]:
    """``queues`` (as the database stores them) with the values of the settings their
    stacks' policies own; a tenant with only such values joins ``tenants`` with the
    default weight."""
    for owned in owned_settings().values():
        users = [name for name, queue in queues.items() if owned.policy in queue.policies]
        stored = stored_values(conn, owned) if users else {}
        for name in users:
            found = stored.get(name)
            if found is None:
                continue
            tenants = dict(queues[name].tenants)
            for tenant, value in found.tenants.items():
                share = tenants.get(tenant, TenantSettings())
                tenants[tenant] = share.model_copy(update={owned.name: value})
            update: dict[str, Any] = {"tenants": tenants}
            if found.default is not None:
                update[owned.name] = found.default
            queues[name] = queues[name].model_copy(update=update)
    return queues


def given_values(queue: QueueSettings, owned: Owned) -> QueueValues | None:
    """The values of one setting a queue's settings were given explicitly (``"off"``
    included), or ``None`` when none: what declaring the queue writes."""
    name = owned.name
    tenants = {t: owned_value(s, name) for t, s in queue.tenants.items() if name in given_fields(s)}
    if name not in given_fields(queue) and not tenants:
        return None
    return QueueValues(owned_value(queue, name), tenants)


def file_values(settings: Settings, queue: QueueSettings, owned: Owned) -> QueueValues:
    """Every value of one setting a file gives one queue: the queue's own tenants' over
    the top-level ones (none when its stack does not name the owning policy)."""
    if owned.policy not in queue.policies:
        return QueueValues()
    name = owned.name
    inherited = {t: owned_value(s, name) for t, s in settings.tenants.items() if t not in queue.tenants}
    own = {t: owned_value(s, name) for t, s in queue.tenants.items()}
    given = {t: v for t, v in (inherited | own).items() if v is not None}
    return QueueValues(owned_value(queue, name), given)


Changed = dict[str, set[str]]
"""The settings written, by queue."""


def values_declare(conn: psycopg.Connection, queues: Mapping[str, QueueSettings]) -> Changed:
    """Write the values the queues were given explicitly (see :func:`given_values`),
    leaving their other values as they are; inside the caller's transaction. Returns
    the settings whose stored value changed, by queue."""
    return _values_write(
        conn,
        lambda owned: {name: v for name, q in queues.items() if (v := given_values(q, owned)) is not None},
        exact=False,
    )


def values_apply(conn: psycopg.Connection, settings: Settings) -> Changed:
    """Make the values of every queue of the file what the file gives (``config apply``):
    write the new ones, remove those it no longer gives; inside the caller's transaction.
    Returns the settings whose stored value changed, by queue."""
    return _values_write(
        conn,
        lambda owned: {name: file_values(settings, q, owned) for name, q in settings.queues.items()},
        exact=True,
    )


def _values_write(
    conn: psycopg.Connection, wanted_of: Callable[[Owned], Mapping[str, QueueValues]], *, exact: bool
) -> Changed:
    """Each owned setting's values :func:`_write` (``wanted_of`` the setting): the settings
    whose stored value changed, by queue. Without ``exact``, a setting given no value is
    not visited."""
    changed: Changed = {}
    for owned in owned_settings().values():
        wanted = wanted_of(owned)
        if wanted or exact:
            for queue in _write(conn, owned, wanted, exact=exact):
                changed.setdefault(queue, set()).add(owned.name)
    return changed


def _write(
    conn: psycopg.Connection, owned: Owned, wanted: Mapping[str, QueueValues], *, exact: bool
) -> list[str]:
    """Write what differs from the stored values; with ``exact``, also remove the values
    of these queues that ``wanted`` does not give. Returns the queues it wrote."""
    if not present(conn, owned):
        if any(
            w.default is not None or any(v is not None for v in w.tenants.values()) for w in wanted.values()
        ):
            raise _missing(owned)
        return []
    stored = _read(conn, owned)
    written = []
    with operation("configsync_policy_settings_write"):
        for queue, want in sorted(wanted.items()):
            have = stored.get(queue, QueueValues())
            writes: list[tuple[str | None, Any]] = []
            if want.default != have.default:
                writes.append((None, want.default))
            for tenant in sorted(set(want.tenants) | (set(have.tenants) if exact else set())):
                value = want.tenants.get(tenant)
                if value != have.tenants.get(tenant):
                    writes.append((tenant, value))
            for who, value in writes:
                owned.setting.write(conn, queue, who, value)
            if writes:
                written.append(queue)
    return written


def queue_values(
    conn: psycopg.Connection, queue: str, policies: Collection[str] | None = None
) -> dict[str, Any]:
    """A queue's stored values of the queue settings policies own (of ``policies`` only,
    when given), by name: those it has a value of."""
    found = {}
    for owned in owned_settings().values():
        if "queue" in owned.setting.levels and (policies is None or owned.policy in policies):
            value = stored_values(conn, owned).get(queue, QueueValues()).default
            if value is not None:
                found[owned.name] = value
    return found


def settings_reconfigured(
    conn: psycopg.Connection, changed: Mapping[str, Collection[str]]
) -> dict[str, Reconfigured]:
    """Hand each queue's changed settings (their names), committed, to every installed
    policy (:meth:`~fairsched.policy.Policy.reconfigured`: aging re-keys the queued jobs
    for a new interval). ``conn`` must not be in a transaction."""
    policies = registry().values()
    done = {}
    for queue, names in sorted(changed.items()):
        if names:
            given = frozenset(names)
            done[queue] = Reconfigured(given, sum(p.reconfigured(conn, queue, given) for p in policies))
    return done


@dataclass(frozen=True)
class Reconfigured:
    """A queue's settings that changed, and the jobs the policies changed after them."""

    settings: frozenset[str]
    jobs: int


# -- live changes ------------------------------------------------------------------


def value_checked(name: str, value: object, *, tenant: str | None) -> tuple[Owned, Any]:
    """The setting called ``name`` and ``value`` in its stored form (``None``: remove it),
    for a tenant or (``tenant=None``) as a queue's default; :class:`InvalidInput` for an
    unknown setting, a level it does not have, or a value its policy refuses."""
    owned = owned_setting(name)
    level = "queue" if tenant is None else "tenant"
    if level not in owned.setting.levels:
        given = "a queue's default: give no tenant" if tenant is not None else "per tenant: give a tenant"
        raise InvalidInput(f"{name} (policy {owned.policy}) is set {given}")
    return owned, value_parsed(owned, value)


def value_change(
    conn: psycopg.Connection, queue: str, name: str, value: object, *, tenant: str | None = None
) -> Any:
    """Set a policy's setting for a tenant (``tenant=None``: the queue's default), or
    remove it (``None`` or ``"off"``), and wake the queue's claimers; the next claim
    follows it, and once committed the policies bring the queue's jobs in line
    (:func:`settings_reconfigured`; inside the caller's transaction, the caller's to do).
    Returns the value now set. Refuses unknown queues, and a value other than the default
    on a queue whose stack does not name the owning policy (removing one is allowed
    everywhere), changing nothing."""
    check_queue_name(queue)
    if tenant is not None:
        check_label("tenant", tenant, MAX_TENANT_CHARS)
    owned, parsed = value_checked(name, value, tenant=tenant)
    outermost = idle(conn)
    with conn.transaction():
        with operation("configsync_queue_policies"):
            row = conn.execute(QUERIES["configsync_queue_policies"], {"name": queue}).fetchone()
        if row is None:
            raise UnknownQueue(queue)
        if owned.policy not in row[0] and parsed not in (None, owned.setting.default):
            raise InvalidInput(
                f"queue {queue}'s policy stack [{', '.join(row[0])}] has no {owned.policy}, so a "
                f"{name} would not shape its claims: add {owned.policy} to its policies first"
            )
        if not present(conn, owned):
            raise _missing(owned)
        with operation("configsync_policy_setting_set"):
            owned.setting.write(conn, queue, tenant, parsed)
        conn.execute(QUERIES["configsync_queue_notify"], {"name": queue})
    if outermost:
        settings_reconfigured(conn, {queue: {name}})
    return parsed


def tenant_values(stored: QueueSettings, tenant: str) -> dict[str, Any]:
    """A tenant's values of the tenant settings its queue's stack owns (``tenant show``):
    its own under the setting's name, the queue's default under ``queue_`` and the name."""
    own = stored.tenants.get(tenant)
    shown: dict[str, Any] = {}
    for owned in stack_settings(stored.policies):
        if "tenant" in owned.setting.levels:
            shown[owned.name] = owned_value(own, owned.name) if own else None
            if "queue" in owned.setting.levels:
                shown[f"queue_{owned.name}"] = owned_value(stored, owned.name)
    return shown
