"""The range of every number a user sets, in one place (docs/configuration.md).

Each bound is checked at every entry: the settings models (config file, ``FAIRSCHED_*``
variables and the API's ``QueueSettings``/``TenantSettings``), the command line, the
client's own arguments, and the database itself (CHECK constraints on
``fairsched.queues`` and ``fairsched.tenant_shares``, ``migrations/004_bounds.sql``).
Every range is finite: a value the database turns into a timestamp, an interval or a
stride must never overflow there, for one queue's value would then fail work that reads
many queues at once (the recovery sweep) or every claim of its queue.

Why these bounds:

- Weights, 0.001 to 1,000,000: a claim advances a tenant's pass by ``cost / weight``
  (cost 1 a job, or its run time in seconds, at most a few days); at 0.001 a stride is
  at most about 1e9, far from overflowing a double however many claims add up; the
  stride of the heaviest tenant (1e-6 a job) still moves a pass below 2^32 (passes grow
  with the claims of the queue and are never rebased, so a wider range would lose it
  sooner).
- Lease and max runtime, at most 7 days: ``now() + lease`` and ``started + max_runtime``
  stay valid timestamps; a crashed worker's job is back within a week at worst. Work
  longer than that belongs in several jobs.
- Backoff base and cap, 0 to 1 day: a retry waits for a transient failure to pass;
  a later start is a scheduled job (``run_at``).
- Aging interval, at most 30 days: ``priority * interval`` stays below 2^53 for every
  priority, so aging keys stay exact to the second at least.
- Caps, 1 to 1,000,000 running jobs: beyond is no cap (and a PostgreSQL integer).
- ``run_at``, from 1 day before now to 3650 days after (the client's clock; the day
  allows for clock skew and replays): outside is a mistake, not a plan.
- A schedule's jitter, at most 1 hour: it spreads the jobs of many schedules due at the
  same tick; a later start is a later tick.
- Payloads, at most 100 levels deep and integers of at most 500 digits: the JSON encoder
  gives up near Python's recursion limit, which depends on the caller's stack, and
  Python converts at least 640 digits per integer in every process, so below both the
  limits are the same everywhere; a bigger number goes as a string.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from fairsched.errors import InvalidInput

WEIGHT_MIN = 0.001
WEIGHT_MAX = 1_000_000.0
"""A tenant's weight, both ends included."""
LEASE_MAX_SECONDS = 604_800.0
"""7 days: the longest lease, per claim and per renewal (more than 0)."""
MAX_RUNTIME_MAX_SECONDS = 604_800.0
"""7 days: the longest ``max_runtime_seconds`` (more than 0)."""
BACKOFF_MAX_SECONDS = 86_400.0
"""1 day: the longest ``backoff_base_seconds`` and ``backoff_max_seconds`` (0 or more)."""
AGING_INTERVAL_MAX_SECONDS = 2_592_000.0
"""30 days: the longest ``aging_interval_seconds`` (more than 0)."""
CAP_MAX = 1_000_000
"""The most running jobs a cap may allow (a tenant's ``cap``, a queue's ``tenant_cap``)."""
ATTEMPTS_MAX = 1000
"""The most attempts a job may have (``max_attempts``, ``unknown_max_attempts``)."""
PROCESS_INTERVAL_MAX_SECONDS = 3600.0
"""1 hour: the longest poll, recovery and heads-refresh interval of a worker."""
GRACE_PERIOD_MAX_SECONDS = 604_800.0
"""7 days: the longest shutdown grace period (no job runs longer)."""
POOL_MAX_SIZE = 1000
"""The most connections a worker's pool may open."""
PREPARE_THRESHOLD_MAX = 1_000_000
"""The highest ``prepare_threshold`` (0 prepares every statement at once)."""
RUN_AT_PAST = timedelta(days=1)
RUN_AT_FUTURE = timedelta(days=3650)
"""``run_at`` lies within ``[now - RUN_AT_PAST, now + RUN_AT_FUTURE]``."""
SCHEDULE_JITTER_MAX_SECONDS = 3600.0
"""1 hour: the longest ``jitter`` of a schedule (0 or more)."""
PAYLOAD_MAX_DEPTH = 100
"""Lists and objects nested in a payload, at most."""
PAYLOAD_MAX_INT_DIGITS = 500
"""Digits of an integer in a payload, at most."""
PARAMS_MAX = 64
"""Entries of a queue's ``policy_params``, at most."""
PARAM_MAX_CHARS = 1000
"""Characters of a ``policy_params`` key (at most 63) or text value, at most."""
PARAM_INT_MAX = 2**53
"""Largest integer ``policy_params`` value (either sign): one a JSON reader reads exactly."""


def shown(value: float) -> str:
    """A bound as messages print it.

    >>> shown(1_000_000.0), shown(0.001), shown(604_800)
    ('1000000', '0.001', '604800')
    """
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def number_checked(name: str, value: Any, low: float, high: float, *, above: bool = False) -> float:
    """``value`` when it is a finite real number in ``[low, high]`` (``(low, high]`` when
    ``above``), else :class:`InvalidInput` naming ``name`` and the range.

    >>> number_checked("weight", 2, WEIGHT_MIN, WEIGHT_MAX)
    2.0
    >>> number_checked("lease_seconds", float("inf"), 0, LEASE_MAX_SECONDS, above=True)
    Traceback (most recent call last):
    ...
    fairsched.errors.InvalidInput: lease_seconds must be a number in (0, 604800], got inf
    """
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int beyond any float
        number = math.nan
    inside = (low < number if above else low <= number) and number <= high
    if not inside:
        opening = "(" if above else "["
        raise InvalidInput(f"{name} must be a number in {opening}{shown(low)}, {shown(high)}], got {value!r}")
    return number


def params_problems(params: dict[Any, Any]) -> list[str]:
    """What is out of range in a queue's ``policy_params`` (empty: nothing).

    >>> params_problems({"factor": float("inf"), "n": 2**60, "ok": "yes"})
    ['factor: give a finite number', 'n: give an integer within ±2^53']
    """
    if len(params) > PARAMS_MAX:
        return [f"at most {PARAMS_MAX} parameters, got {len(params)}"]
    problems = []
    for key, value in params.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 63:
            problems.append(f"{str(key)[:40]!r}: a parameter name has 1 to 63 characters")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{key}: give a finite number")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > PARAM_INT_MAX:
            problems.append(f"{key}: give an integer within ±2^53")
        elif isinstance(value, str) and len(value) > PARAM_MAX_CHARS:
            problems.append(f"{key}: text of at most {PARAM_MAX_CHARS} characters")
    return problems
