"""ratelimit: at most N jobs per period per tenant, a token bucket in database time.

A tenant's limit ``N/period`` (period ``s``, ``m``, ``h`` or ``d``) is a bucket of at
most N tokens refilled at N per period; a claim leases a job only for a token. The
bucket lives in ``fairsched.ratelimits`` (this policy's migrations), locked by the
claims that charge it, so no number of workers or batch sizes lets a tenant pass its
rate. A queue's default limit applies to every tenant without one of its own.

Its part of the claim is an :class:`~fairsched.policy.Admission`: tenants with less
than one token are passed over (so other tenants' jobs are claimed instead: with
``weighted`` in the stack the tenant is skipped at tenant selection, without it the
claim's scan walks past the throttled tenant's jobs), and the claim's candidates are
admitted against the buckets, charged in the claim's transaction.

Its limits are its :class:`~fairsched.policy.Setting` ``rate`` (a queue's default and a
tenant's own), and a tenant whose bucket holds less than one job is reported throttled
(its :class:`~fairsched.policy.Throttle`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

import psycopg
from psycopg import sql

from fairsched.errors import InvalidInput
from fairsched.policy import Admission, BasePolicy, Setting, Throttle

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
"""The periods a rate may name, in seconds."""

MAX_JOBS = 1_000_000
"""The most jobs one limit may allow per period."""

_RATE = re.compile(r"^\s*(\d{1,7})\s*/\s*([smhd])\s*$")

OFF = "off"
"""The rate that removes a limit."""


@dataclass(frozen=True)
class Rate:
    """``jobs`` per ``period_seconds``.

    >>> Rate.parse("50/s"), str(Rate.parse(" 3 / h "))
    (Rate(jobs=50, period_seconds=1), '3/h')
    """

    jobs: int
    period_seconds: int

    @classmethod
    def parse(cls, text: object) -> Rate:
        """A rate from ``"N/s"``, ``"N/m"``, ``"N/h"`` or ``"N/d"`` (N from 1 to 1,000,000);
        :class:`InvalidInput` for anything else."""
        match = _RATE.match(text) if isinstance(text, str) else None
        jobs = int(match.group(1)) if match else 0
        if match is None or not 1 <= jobs <= MAX_JOBS:
            shown = text[:40] if isinstance(text, str) else type(text).__name__
            raise InvalidInput(
                f"rate {shown!r}: give jobs per period as N/s, N/m, N/h or N/d, "
                f"N a whole number from 1 to {MAX_JOBS:,} (or {OFF!r} to remove the limit)"
            )
        return cls(jobs, PERIODS[match.group(2)])

    @property
    def per_second(self) -> float:
        return self.jobs / self.period_seconds

    def __str__(self) -> str:
        unit = next(u for u, seconds in PERIODS.items() if seconds == self.period_seconds)
        return f"{self.jobs}/{unit}"


def parse_rate(text: str) -> Rate | None:
    """A rate, or ``None`` for ``"off"``; :class:`InvalidInput` for anything else."""
    if isinstance(text, str) and text.strip().lower() == OFF:
        return None
    return Rate.parse(text)


DEFAULT = ""
"""The tenant name of a queue's default limit in ``fairsched.ratelimits``."""

_SET = sql.SQL("""INSERT INTO fairsched.ratelimits AS r (queue_name, tenant, jobs, period_seconds)
VALUES (%(queue)s, %(tenant)s, %(jobs)s, %(period)s)
ON CONFLICT (queue_name, tenant) DO UPDATE
   SET jobs = excluded.jobs, period_seconds = excluded.period_seconds,
       tokens = least(r.tokens, excluded.jobs), updated_at = now()""")
_OFF = sql.SQL("""UPDATE fairsched.ratelimits
   SET jobs = NULL, period_seconds = NULL, updated_at = now()
 WHERE queue_name = %(queue)s AND tenant = %(tenant)s AND tenant <> ''""")
_OFF_DEFAULT = sql.SQL("DELETE FROM fairsched.ratelimits WHERE queue_name = %(queue)s AND tenant = ''")
_LIST = sql.SQL("""SELECT r.queue_name, r.tenant, r.jobs, r.period_seconds
  FROM fairsched.ratelimits AS r
 WHERE r.jobs IS NOT NULL
 ORDER BY r.queue_name, r.tenant""")


def rate_set(conn: psycopg.Connection, queue: str, tenant: str | None, rate: Rate | None) -> None:
    """Set (or, with ``None``, remove) a tenant's limit, or with ``tenant=None`` the
    queue's default; the next claim applies it. A tenant whose own limit is removed
    follows the queue's default, if any."""
    params = {"queue": queue, "tenant": DEFAULT if tenant is None else tenant}
    if rate is not None:
        conn.execute(_SET, params | {"jobs": rate.jobs, "period": rate.period_seconds})
    else:
        conn.execute(_OFF_DEFAULT if tenant is None else _OFF, params)


def rates(conn: psycopg.Connection) -> list[tuple[str, str | None, str]]:
    """Every limit as ``(queue, tenant, "N/u")``, tenant ``None`` for a queue's default."""
    return [
        (queue, None if tenant == DEFAULT else tenant, str(Rate(jobs, math.trunc(period))))
        for queue, tenant, jobs, period in conn.execute(_LIST).fetchall()
    ]


def _rate_write(conn: psycopg.Connection, queue: str, tenant: str | None, rate: str | None) -> None:
    rate_set(conn, queue, tenant, None if rate is None else Rate.parse(rate))


EXAMPLE = "50/s"


def _rate_parsed(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(
            f'give a rate as a string, e.g. "{EXAMPLE}", or "{OFF}" (jobs per period as N/s, N/m, N/h or N/d)'
        )
    return str(Rate.parse(value))


RATE = Setting(
    name="rate",
    levels=("queue", "tenant"),
    example=EXAMPLE,
    table="fairsched.ratelimits",
    parse=_rate_parsed,
    read=rates,
    write=_rate_write,
)
"""Most jobs claimed per period: a queue's default for its tenants, or a tenant's own."""

THROTTLE = Throttle(level=sql.Identifier("fairsched", "ratelimit_level"), shown_as="rate_budget")
"""A tenant with less than one token left is throttled; ``tenant show`` gives its level."""

ADMISSION = Admission(
    budget=sql.Identifier("fairsched", "ratelimit_budget"),
    admit=sql.Identifier("fairsched", "ratelimit_admit"),
)


class Ratelimit(BasePolicy):
    """Admits a claim's jobs against each tenant's token bucket."""

    name = "ratelimit"

    def migrations(self) -> Traversable:
        return files("fairsched_policies") / "migrations" / "ratelimit"

    def admission(self) -> Admission:
        return ADMISSION

    def settings(self) -> tuple[Setting]:
        return (RATE,)

    def throttle(self) -> Throttle:
        return THROTTLE
