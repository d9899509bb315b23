"""The plans ``fairsched simulate`` plays: from a scenario file, from a queue's history,
and under a proposed change.

A scenario (TOML or JSON) names the tenants, their weights, caps and load (backlog,
Poisson rate, run times, aggregates) and the queue setting; :func:`scenario_plan` turns
it into seeded arrivals. :func:`history_plan` replays a real queue's recent jobs as they
arrived and ran. :func:`propose` applies a proposal file and ``--set`` items to a
plan's queue setting and slots. The replay itself is :mod:`fairsched.simulate`'s.
"""

from __future__ import annotations

import json
import random
import tomllib
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fairsched.db.sql import QUERIES
from fairsched.errors import ConfigError, InvalidInput
from fairsched.policy.registry import resolve
from fairsched.settings import QueueSettings, TenantSettings, describe_validation_error
from fairsched.simulate import Arrival, Plan

MAX_JOBS = 200_000


class TenantLoad(BaseModel):
    """One tenant of a scenario: its weight and cap, and the work it brings."""

    model_config = ConfigDict(extra="forbid")

    weight: float = Field(1.0, gt=0, le=1_000_000)
    cap: int | None = Field(None, gt=0)
    backlog: int = Field(0, ge=0, le=MAX_JOBS, description="jobs queued at time 0")
    rate: float = Field(0.0, ge=0, le=100_000, description="arrivals per second (Poisson) after time 0")
    job_ms: float = Field(100.0, gt=0, description="run time of each job, in milliseconds")
    jitter: float = Field(0.0, ge=0, lt=1, description="run times uniform within job_ms * (1 +- jitter)")
    priority: int = 0
    aggregates: int = Field(0, ge=0, description="spread jobs over this many serial aggregates (0: none)")


class Scenario(BaseModel):
    """A workload and the queue setting it runs under (TOML or JSON)."""

    model_config = ConfigDict(extra="forbid")

    slots: int = Field(8, gt=0, le=1000, description="jobs running at once, all workers together")
    duration_seconds: float = Field(10.0, gt=0, le=86_400, description="arrivals and measurement window")
    starving_after_seconds: float = Field(30.0, gt=0, description="claimable longer than this = starving")
    seed: int = 1
    queue: dict[str, Any] = Field(default_factory=dict, description="queue settings (config file keys)")
    tenants: dict[str, TenantLoad] = Field(default_factory=dict, min_length=1)


# -- scenarios -------------------------------------------------------------------


def load_scenario(path: Path) -> Scenario:
    """A scenario file, TOML or JSON by extension; every bad key named."""
    try:
        text = path.read_text("utf-8")
        raw = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {e}") from None
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{path}: {describe_validation_error(e)}") from None
    queue_setting(scenario.queue, scenario.tenants, where=str(path))
    return scenario


def queue_setting(
    queue: Mapping[str, Any], tenants: Mapping[str, TenantLoad], *, where: str
) -> QueueSettings:
    """The queue settings of a scenario, tenants' weights and caps included, validated."""
    declared = {name: TenantSettings(weight=t.weight, cap=t.cap) for name, t in tenants.items()}
    try:
        setting = QueueSettings.model_validate({**queue, "tenants": declared})
    except ValidationError as e:
        raise ConfigError(f"{where}: queue: {describe_validation_error(e)}") from None
    try:
        resolve(setting.policies)
    except ConfigError as e:
        raise ConfigError(f"{where}: queue.policies: {e}") from None
    return setting


def arrivals(scenario: Scenario) -> list[Arrival]:
    """The scenario's jobs in arrival order: backlogs at 0, then seeded Poisson arrivals."""
    rng = random.Random(scenario.seed)
    jobs: list[Arrival] = []
    for name, load in sorted(scenario.tenants.items()):
        times = [0.0] * load.backlog
        t = 0.0
        while load.rate > 0:
            t += rng.expovariate(load.rate)
            if t >= scenario.duration_seconds:
                break
            times.append(t)
        for k, at in enumerate(times):
            seconds = load.job_ms / 1000 * (1 + load.jitter * rng.uniform(-1, 1))
            key, seq = (
                (f"agg-{k % load.aggregates}", k // load.aggregates + 1) if load.aggregates else (None, None)
            )
            jobs.append(Arrival(at, name, seconds, load.priority, key, seq))
    if len(jobs) > MAX_JOBS:
        raise InvalidInput(f"the scenario makes {len(jobs)} jobs; at most {MAX_JOBS} are simulated")
    jobs.sort(key=lambda a: (a.at, a.tenant))
    return jobs


def scenario_plan(scenario: Scenario, queue: QueueSettings | None = None, slots: int | None = None) -> Plan:
    """The plan of a scenario (optionally under another queue setting or slot count)."""
    setting = queue or queue_setting(scenario.queue, scenario.tenants, where="scenario")
    return Plan(
        setting,
        slots or scenario.slots,
        scenario.duration_seconds,
        scenario.starving_after_seconds,
        arrivals(scenario),
    )


def history_plan(
    conn: psycopg.Connection,
    queue: str,
    setting: QueueSettings,
    *,
    since: datetime,
    until: datetime,
    starving_after: float,
    slots: int | None = None,
    limit: int = MAX_JOBS,
) -> Plan:
    """A plan from a real queue's recent jobs: arrivals and run times as they happened.

    Jobs that never finished an attempt run for the median observed run time.
    Slots default to the most attempts that ran at once in the history. The window is
    found by bisecting the jobs' primary key (``simulate_history``), so the read costs
    the jobs created since ``since`` (of every queue; at most ``limit`` of this one), never
    the older ones.
    """
    rows = conn.execute(
        QUERIES["simulate_history"], {"queue": queue, "since": since, "limit": limit}
    ).fetchall()
    if not rows:
        raise InvalidInput(f"queue {queue!r} has no jobs created since {since.isoformat(timespec='seconds')}")
    known = sorted(r[6] for r in rows if r[6] is not None and r[6] > 0)
    typical = known[len(known) // 2] if known else 1.0
    serial = any(p.holds for p in resolve(setting.policies))
    jobs = [
        Arrival(
            at=max(r[0], 0.0),
            tenant=r[1],
            seconds=r[6] if r[6] is not None and r[6] > 0 else typical,
            priority=r[2],
            aggregate_key=r[3] if serial else None,
            aggregate_seq=r[4] if serial else None,
        )
        for r in rows
    ]
    spans = [(r[5], r[5] + r[6]) for r in rows if r[5] is not None and r[6] is not None]
    horizon = max((until - since).total_seconds(), jobs[-1].at + 1e-3)
    return Plan(setting, slots or max(peak_concurrency(spans), 1), horizon, starving_after, jobs)


def peak_concurrency(spans: Iterable[tuple[float, float]]) -> int:
    """The most intervals open at one instant.

    >>> peak_concurrency([(0, 2), (1, 3), (2.5, 4)])
    2
    """
    edges = sorted(
        [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1])
    )
    peak = running = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


# -- proposals ----------------------------------------------------------------------


def propose(
    base: QueueSettings, slots: int, changes: Iterable[str], file: Path | None
) -> tuple[QueueSettings, int]:
    """Apply a proposal file and ``--set`` items (in that order) to a setting.

    File: ``slots``, ``[queue]`` keys, ``[tenants.<t>] weight/cap``. Items:
    ``tenant.<t>.weight=N``, ``tenant.<t>.cap=N|none``, ``queue.<key>=value``, ``slots=N``.
    """
    queue = base.model_dump(mode="python", exclude={"tenants", "policy_params"})
    queue["policy_params"] = dict(base.policy_params)
    tenants = {name: t.model_dump() for name, t in base.tenants.items()}
    where = "--set"
    if file is not None:
        where = str(file)
        try:
            raw = tomllib.loads(file.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"{file}: cannot read a TOML proposal: {e}") from None
        unknown = sorted(set(raw) - {"slots", "queue", "tenants"})
        if unknown:
            raise ConfigError(f"{file}: unknown keys {', '.join(unknown)}; expected slots, queue, tenants")
        slots = raw.get("slots", slots)
        queue.update(raw.get("queue", {}))
        for name, values in raw.get("tenants", {}).items():
            tenants.setdefault(name, {"weight": 1.0, "cap": None}).update(values)
    for item in changes:
        key, sep, value = item.partition("=")
        parts = key.strip().split(".")
        if not sep:
            raise InvalidInput(f"--set {item!r}: expected key=value, e.g. tenant.acme.weight=4")
        if parts == ["slots"]:
            slots = _int(item, value)
        elif len(parts) == 3 and parts[0] == "tenant" and parts[2] in ("weight", "cap"):
            entry = tenants.setdefault(parts[1], {"weight": 1.0, "cap": None})
            entry[parts[2]] = None if value.strip().lower() == "none" else _json(value)
        elif len(parts) == 2 and parts[0] == "queue":
            queue[parts[1]] = value.split(",") if parts[1] == "policies" else _json(value)
        else:
            raise InvalidInput(
                f"--set {item!r}: use tenant.<name>.weight=N, tenant.<name>.cap=N|none, "
                "queue.<key>=value or slots=N"
            )
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= 1000:
        raise InvalidInput(f"{where}: slots must be a whole number from 1 to 1000")
    try:
        setting = QueueSettings.model_validate({**queue, "tenants": tenants})
    except ValidationError as e:
        raise InvalidInput(f"{where}: {describe_validation_error(e)}") from None
    try:
        resolve(setting.policies)
    except ConfigError as e:
        raise InvalidInput(f"{where}: {e}") from None
    return setting, slots


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text.strip()


def _int(item: str, text: str) -> int:
    if not text.strip().isdigit():
        raise InvalidInput(f"--set {item!r}: not a whole number")
    return int(text)
