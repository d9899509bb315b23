"""Configuration file against database: what differs (``config diff``) and the database's
settings written back as TOML (``config export``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fairsched.config.policysettings import QueueValues, file_values
from fairsched.config.sync import DEFAULT_TENANT, STORED_FIELDS, effective_tenants, same, shown
from fairsched.policy.owned import Owned, owned_settings, owned_value, stack_settings
from fairsched.settings import QueueSettings, Settings, TenantSettings

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
        text = f"{self.key}: file {shown(self.file)} | database {shown(self.database)}"
        return f"{text} ({self.note})" if self.note else text


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
            if not same(mine, theirs):
                found.append(Difference(f"{key}.{field}", mine, theirs))
        shares = {t: s for t, s in stored.tenants.items() if not _same_tenant(s, DEFAULT_TENANT)}
        found += _tenant_differences(key, effective_tenants(settings, wanted), shares)
        for owned in owned_settings().values():
            mine = file_values(settings, wanted, owned)
            found += _value_differences(key, owned.name, mine, _stored_values(stored, owned))
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


def _same_tenant(a: TenantSettings, b: TenantSettings) -> bool:
    """Same weight and cap (the policies' settings are compared on their own)."""
    return same(a.weight, b.weight) and a.cap == b.cap


def _stored_values(queue: QueueSettings, owned: Owned) -> QueueValues:
    name = owned.name
    tenants = {t: v for t, s in queue.tenants.items() if (v := owned_value(s, name)) is not None}
    return QueueValues(owned_value(queue, name), tenants)


def _value_differences(key: str, name: str, wanted: QueueValues, stored: QueueValues) -> list[Difference]:
    """One setting's value on the queue, then each tenant's own, where file and database differ."""
    pairs = [(f"{key}.{name}", wanted.default, stored.default)]
    for tenant in sorted(set(wanted.tenants) | set(stored.tenants)):
        pairs.append(
            (f"{key}.tenants.{tenant}.{name}", wanted.tenants.get(tenant), stored.tenants.get(tenant))
        )
    return [
        Difference(k, mine, theirs, "config apply removes it" if mine is None else "")
        for k, mine, theirs in pairs
        if mine != theirs
    ]


# -- export ------------------------------------------------------------------------


def export_toml(database: Mapping[str, QueueSettings], *, now: datetime | None = None) -> str:
    """The database's queues and tenants (with the values of the settings their policies
    own) as a TOML file that ``config apply`` round-trips."""
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
        lines += _owned_lines(queue, queue_defaults=True)
        for tenant, share in sorted(queue.tenants.items()):
            lines += ["", f"[queues.{toml_key(name)}.tenants.{toml_key(tenant)}]"]
            lines.append(f"weight = {toml_value(share.weight)}")
            if share.cap is not None:
                lines.append(f"cap = {share.cap}")
            lines += _owned_lines(share)
    return "\n".join(lines) + "\n"


def _owned_lines(settings: QueueSettings | TenantSettings, *, queue_defaults: bool = False) -> list[str]:
    """``name = value`` of each policy's setting given a value, by name; with
    ``queue_defaults``, also the default of each queue-only setting a policy of the
    queue's stack owns (as the file would hold it: every stored setting shown)."""
    values = {name: owned_value(settings, name) for name in settings.model_extra or {}}
    if queue_defaults and isinstance(settings, QueueSettings):
        for o in stack_settings(settings.policies):
            if o.setting.levels == ("queue",) and values.get(o.name) is None:
                values[o.name] = o.setting.default
    return [f"{toml_key(n)} = {toml_value(v)}" for n, v in sorted(values.items()) if v is not None]


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
