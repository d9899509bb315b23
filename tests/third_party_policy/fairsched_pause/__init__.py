"""pause: hold a queue's tenants back by name, and count each tenant's finished jobs.

A third-party fairsched policy, shipped as its own distribution
(``fairsched-pause-policy``) under the entry-point group ``fairsched.policies``; it
uses the public interface (:mod:`fairsched.policy`) only:

- a **claim filter**: jobs of a tenant listed in ``fairsched_pause.paused`` for their
  queue are not claimable, unless the queue's ``policy_params`` say
  ``"pause_enabled": false`` (the switch for the whole list, read from ``q.params``);
- an **on_finish hook**: each job that leaves ``running`` for good is counted in
  ``fairsched_pause.finished`` by queue, tenant and final status, in the finishing
  transaction;
- a **tenant setting** ``pause``, the reason a tenant is paused: ``pause = "unpaid"``
  in the configuration file, ``fairsched policy setting QUEUE pause REASON --tenant T``
  (or ``off``), ``Client.set_policy_setting``;
- a **throttle**: a paused tenant with claimable work is reported throttled (held back
  on its own), not starving.

Its schema is its migrations' (``fairsched migrate`` applies them after the engine's);
``fairsched policy uninstall pause`` drops it. Pausing is a row, which the setting
writes::

    INSERT INTO fairsched_pause.paused (queue_name, tenant) VALUES ('emails', 'acme');

>>> Pause().claim_filter().as_string(None).startswith("(SELECT q.params")
True
>>> PAUSE.parse("  unpaid invoice "), Pause().settings() == (PAUSE,)
('unpaid invoice', True)
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable

import psycopg
from psycopg import sql

from fairsched.policy import BasePolicy, Setting, Throttle

PARAM = "pause_enabled"
"""The queue's ``policy_params`` key that turns pausing off when ``false``."""

# Per candidate: the switch from the claim's queue row, then a probe of the paused
# list's primary key (queue_name, tenant).
_FILTER = sql.SQL("""(SELECT q.params -> {param} FROM q) = 'false'::jsonb
            OR NOT EXISTS (SELECT FROM fairsched_pause.paused AS p
                            WHERE p.queue_name = j.queue_name AND p.tenant = j.tenant)""").format(
    param=sql.Literal(PARAM)
)

# The jobs that left running for good, counted per tenant and status; rows taken in
# (tenant, status) order, so concurrent finishers lock them in one order.
_FINISHED_COUNT = sql.SQL("""INSERT INTO fairsched_pause.finished AS f
       (queue_name, tenant, status, jobs, last_finished_at)
SELECT j.queue_name, j.tenant, j.status, count(*), now()
  FROM fairsched.jobs AS j
 WHERE j.id = ANY (%(ids)s) AND j.queue_name = %(queue)s
   AND j.status IN ('succeeded', 'dead', 'discarded')
 GROUP BY j.queue_name, j.tenant, j.status
 ORDER BY j.tenant, j.status
ON CONFLICT (queue_name, tenant, status) DO UPDATE
   SET jobs = f.jobs + excluded.jobs, last_finished_at = excluded.last_finished_at""")


REASON_CHARS = 200
"""The longest reason a pause may give."""

_PAUSED = sql.SQL("SELECT queue_name, tenant, reason FROM fairsched_pause.paused ORDER BY queue_name, tenant")
_PAUSE = sql.SQL("""INSERT INTO fairsched_pause.paused AS p (queue_name, tenant, reason)
VALUES (%(queue)s, %(tenant)s, %(reason)s)
ON CONFLICT (queue_name, tenant) DO UPDATE SET reason = excluded.reason""")
_UNPAUSE = sql.SQL("DELETE FROM fairsched_pause.paused WHERE queue_name = %(queue)s AND tenant = %(tenant)s")


def _reason(value: object) -> str:
    """A pause's reason: text of 1 to :data:`REASON_CHARS` characters, stripped."""
    text = value.strip() if isinstance(value, str) else ""
    if not 1 <= len(text) <= REASON_CHARS:
        shown = value[:40] if isinstance(value, str) else type(value).__name__
        raise ValueError(
            f"pause {shown!r}: give the reason as text of 1 to {REASON_CHARS} characters (or 'off')"
        )
    return text


def _paused(conn: psycopg.Connection) -> list[tuple[str, str | None, str]]:
    return [(queue, tenant, reason) for queue, tenant, reason in conn.execute(_PAUSED).fetchall()]


def _pause(conn: psycopg.Connection, queue: str, tenant: str | None, reason: str | None) -> None:
    params = {"queue": queue, "tenant": tenant, "reason": reason}
    conn.execute(_UNPAUSE if reason is None else _PAUSE, params)


PAUSE = Setting(
    name="pause",
    levels=("tenant",),
    example="unpaid invoice",
    table="fairsched_pause.paused",
    parse=_reason,
    read=_paused,
    write=_pause,
)
"""Why a tenant is paused on a queue (``off``: not paused)."""

THROTTLE = Throttle(level=sql.Identifier("fairsched_pause", "level"), shown_as="pause_level")
"""A paused tenant's level is 0: the reports count it throttled, not starving."""


class Pause(BasePolicy):
    """Paused tenants are not claimed; finished jobs are counted per tenant."""

    name = "pause"

    def migrations(self) -> Traversable:
        return files(__name__) / "migrations"

    def claim_filter(self) -> sql.Composable:
        return _FILTER

    def on_finish(self, conn: psycopg.Connection, queue: str, job_ids: Sequence[int]) -> None:
        conn.execute(_FINISHED_COUNT, {"ids": list(job_ids), "queue": queue})

    def settings(self) -> tuple[Setting]:
        return (PAUSE,)

    def throttle(self) -> Throttle:
        return THROTTLE
