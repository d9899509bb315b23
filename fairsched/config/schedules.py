"""Schedules between a config file and the database: check, apply (and prune), diff, export.

``config apply`` writes every ``[[schedules]]`` entry in its transaction. A new schedule,
one whose cron expression or time zone changed, and one enabled again start at their
first tick after the apply (database time): no tick of before is caught up. Other changes
(payload, queue, tenant, priority, jitter) keep the tick state. As for queues, schedules
absent from the file stay unless ``--prune`` removes them; ``config diff`` shows them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import psycopg

from fairsched.config.compare import Difference, toml_value
from fairsched.config.sync import Removal
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import encode_payload
from fairsched.errors import InvalidInput
from fairsched.schedules.spec import ScheduleSettings
from fairsched.schedules.store import StoredSchedule, schedules_read
from fairsched.settings import Settings

FIELDS = ("cron", "timezone", "queue", "tenant", "payload", "priority", "jitter", "enabled")
"""A schedule's settings in the order ``config diff`` and ``config export`` show them."""


def schedules_check(settings: Settings) -> None:
    """Refuse a payload larger than ``max_payload_bytes`` (the model checks the rest)."""
    for schedule in settings.schedules:
        try:
            encode_payload(schedule.payload, settings.max_payload_bytes)
        except InvalidInput as e:
            raise InvalidInput(f"schedules.{schedule.name}.payload: {e}") from None


def _timing_changed(wanted: ScheduleSettings, stored: StoredSchedule) -> bool:
    """A new expression or zone, or enabled again: the schedule starts afresh."""
    old = stored.settings
    return (old.cron, old.timezone) != (wanted.cron, wanted.timezone) or (wanted.enabled and not old.enabled)


def _queues_check(conn: psycopg.Connection, settings: Settings, *, prune: bool) -> None:
    """Refuse a schedule whose queue is not declared, or that ``prune`` removes."""
    queues = sorted({s.queue for s in settings.schedules})
    with operation("schedules_queues_declared"):
        rows = conn.execute(QUERIES["schedules_queues_declared"], {"names": queues}).fetchall()
    declared = {row[0] for row in rows} | set(settings.queues)
    going = set(queues) - set(settings.queues) if prune else set()
    for schedule in settings.schedules:
        if schedule.queue not in declared:
            raise InvalidInput(
                f"schedules.{schedule.name}: queue {schedule.queue} is not declared: declare it "
                f"under [queues.{schedule.queue}]; nothing changed"
            )
        if schedule.queue in going:
            raise InvalidInput(
                f"schedules.{schedule.name}: queue {schedule.queue} is absent from the file, so "
                "--prune would remove it: declare it in the file; nothing changed"
            )


def schedules_apply(conn: psycopg.Connection, settings: Settings, *, prune: bool = False) -> list[Removal]:
    """Write the file's schedules inside the caller's transaction, after its queues; with
    ``prune``, remove the schedules absent from the file. Refuses (changing nothing) a
    schedule whose queue is not declared, or that ``prune`` would remove."""
    schedules_check(settings)
    stored = schedules_read(conn, lock=True)
    _queues_check(conn, settings, prune=prune)
    with operation("schedules_now"):
        now_row = conn.execute(QUERIES["schedules_now"]).fetchone()
    assert now_row is not None
    for schedule in settings.schedules:
        old = stored.get(schedule.name)
        if old is None or _timing_changed(schedule, old):
            next_tick = schedule.parsed().next_after(now_row[0])
        else:
            next_tick = old.next_tick
        with operation("schedule_upsert"):
            conn.execute(
                QUERIES["schedule_upsert"],
                schedule.model_dump(exclude={"payload"})
                | {"payload": json.dumps(schedule.payload), "next_tick": next_tick},
            )
    if not prune:
        return []
    gone = sorted(set(stored) - {s.name for s in settings.schedules})
    if gone:
        with operation("schedules_remove"):
            conn.execute(QUERIES["schedules_remove"], {"names": gone})
    return [_removal(stored[name]) for name in gone]


def _removal(stored: StoredSchedule) -> Removal:
    return Removal(f"schedules.{stored.settings.name}", f"{stored.settings.cron} on {stored.settings.queue}")


def schedules_prune_plan(conn: psycopg.Connection, settings: Settings) -> list[Removal]:
    """The schedules ``config apply --prune`` would remove (read only); refuses what the
    real run refuses."""
    schedules_check(settings)
    _queues_check(conn, settings, prune=True)
    wanted = {s.name for s in settings.schedules}
    return [_removal(s) for name, s in sorted(schedules_read(conn).items()) if name not in wanted]


def _value(schedule: ScheduleSettings, field: str) -> Any:
    value = getattr(schedule, field)
    return json.dumps(value, sort_keys=True) if field == "payload" else value


def schedules_diff(settings: Settings, stored: Mapping[str, StoredSchedule]) -> list[Difference]:
    """What differs between the file's schedules and the database's."""
    wanted = {s.name: s for s in settings.schedules}
    found = []
    for name in sorted(set(wanted) | set(stored)):
        key = f"schedules.{name}"
        mine, theirs = wanted.get(name), stored.get(name)
        if mine is None:
            found.append(Difference(key, None, "declared", "config apply keeps it; --prune removes it"))
        elif theirs is None:
            found.append(Difference(key, "declared", None, "config apply declares it"))
        else:
            found += [
                Difference(f"{key}.{field}", _value(mine, field), _value(theirs.settings, field))
                for field in FIELDS
                if _value(mine, field) != _value(theirs.settings, field)
            ]
    return found


def schedules_toml(stored: Mapping[str, StoredSchedule]) -> str:
    """The database's schedules as ``[[schedules]]`` tables ('' when there are none)."""
    lines: list[str] = []
    for _name, schedule in sorted(stored.items()):
        lines += ["", "[[schedules]]", f"name = {toml_value(schedule.settings.name)}"]
        lines += [f"{field} = {toml_value(getattr(schedule.settings, field))}" for field in FIELDS]
    return "\n".join(lines) + "\n" if lines else ""
