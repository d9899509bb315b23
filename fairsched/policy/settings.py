"""What a policy owns beside the claim: its settings, and how it reports a tenant it
holds back (:meth:`~fairsched.policy.Policy.settings`,
:meth:`~fairsched.policy.Policy.throttle`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg import sql

SettingLevel = Literal["queue", "tenant"]
"""Where a policy's setting is given: on a queue (the default of its tenants), on a tenant."""


@dataclass(frozen=True)
class Setting:
    """A setting a policy owns, stored in its own tables (or columns): given in the
    configuration file, on the API's ``QueueSettings``/``TenantSettings``, and live through
    ``fairsched policy setting`` and ``Client.set_policy_setting``.

    - ``name``: its key (lower case, not a key fairsched uses itself), e.g. ``rate``;
    - ``levels``: ``"queue"`` (``[queues.Q]``: the default of the queue's tenants) and/or
      ``"tenant"`` (``[queues.Q.tenants.T]``, and ``[tenants.T]`` for every queue whose
      stack names the policy and that does not list the tenant itself);
    - ``example``: a value, for messages and documentation;
    - ``table``: the relation (``schema.table``) the values live in, created by the
      policy's migrations: until it exists no value is read and writes are refused;
    - ``parse(value)``: the stored form of a given value, of the setting's own type
      (``" 50 / s "`` → ``"50/s"``, ``"30"`` → ``30.0``); raises ``ValueError`` (e.g.
      :class:`fairsched.errors.InvalidInput`) with a message naming the setting for
      anything else, values of another type included. ``"off"`` never reaches it: it
      removes the value;
    - ``read(conn)``: every stored value as ``(queue, tenant, value)``, tenant ``None``
      for a queue's default (a value equal to ``default`` counts as none);
    - ``write(conn, queue, tenant, value)``: store a value in its stored form, or remove
      it (``None``: back to ``default``), for a tenant or (``None``) as the queue's
      default, in the caller's transaction;
    - ``default``: the value where none is given (``None``: no value). A value equal to
      it is the same as none: it may be given even where the policy does not apply.

    Every queue of a configuration file gets exactly the values the file gives it:
    ``config apply`` writes the new ones and removes the others.
    """

    name: str
    levels: tuple[SettingLevel, ...]
    example: str
    table: str
    parse: Callable[[object], Any]
    read: Callable[[psycopg.Connection], Iterable[tuple[str, str | None, Any]]]
    write: Callable[[psycopg.Connection, str, str | None, Any], None]
    default: Any = None


@dataclass(frozen=True)
class Throttle:
    """How the reports tell that the policy holds a tenant back now, on its own limit.

    - ``level``: a function ``level(queue text, tenant text) RETURNS float8`` the policy's
      migrations create: how many jobs the tenant may start now (``NULL``: no limit),
      read without a lock, in a read-only transaction, once per tenant with claimable
      work per scrape. Below 1 the tenant is *throttled*: the exporter, ``fairsched
      status`` and the dashboard report its wait apart and do not count it as starving;
    - ``shown_as``: the field ``fairsched tenant show`` gives the level under.
    """

    level: sql.Identifier
    shown_as: str
