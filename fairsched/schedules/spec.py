"""A schedule as a config file declares it: ``[[schedules]]`` (docs/schedules.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from fairsched import bounds
from fairsched.errors import InvalidInput
from fairsched.schedules.cron import Cron, zone_checked

INT32 = 2**31 - 1
ScheduleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")]
"""Schedule names, as queue names: letters, digits and ``_ . : -``, at most 63 characters."""


PAYLOAD_CHECK_BYTES = 64 * 1024 * 1024
"""The payload size checked with the shape: the largest ``max_payload_bytes`` allows."""


class ScheduleSettings(BaseModel):
    """One periodic job: every tick of ``cron`` (read in ``timezone``) enqueues ``payload``
    for ``tenant`` on ``queue``, at most ``jitter`` seconds later."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: ScheduleName = Field(description="unique name; part of each tick's idempotency key")
    timezone: str = Field("UTC", description="IANA time zone the cron fields are read in")
    cron: str = Field(
        description="5 fields (minute hour day month weekday), or 6 with seconds first", max_length=200
    )
    queue: str = Field(description="the queue the jobs go to (declared in the file or the database)")
    tenant: str = Field(description="the tenant the jobs belong to")
    payload: Any = Field(default_factory=dict, description="the jobs' payload (any JSON value)")
    priority: int = Field(0, ge=-INT32, le=INT32, description="the jobs' priority")
    jitter: float = Field(
        0.0,
        ge=0,
        le=bounds.SCHEDULE_JITTER_MAX_SECONDS,
        description="seconds: each job becomes claimable a random 0..jitter seconds after its tick",
    )
    enabled: bool = Field(True, description="false: keep the schedule, enqueue nothing")

    @field_validator("timezone", "cron", "queue", "tenant", "payload")
    @classmethod
    def _checked(cls, value: Any, info: ValidationInfo) -> Any:
        """Each field as fairsched checks it everywhere; the cron expression in the
        schedule's time zone (UTC when that one is bad: it has its own error). The
        payload's size limit is the applying settings'
        (:func:`fairsched.config.schedules.schedules_check`)."""
        from fairsched.engine import enqueue

        checks: dict[str, Callable[[], object]] = {
            "timezone": lambda: zone_checked(value),
            "cron": lambda: Cron.parse(value, info.data.get("timezone", "UTC")),
            "queue": lambda: enqueue.check_queue_name(value),
            "tenant": lambda: enqueue.check_label("tenant", value, enqueue.MAX_TENANT_CHARS),
            "payload": lambda: enqueue.encode_payload(value, PAYLOAD_CHECK_BYTES),
        }
        try:
            checks[str(info.field_name)]()
        except InvalidInput as e:
            raise PydanticCustomError(
                str(info.field_name), str(e).replace("{", "{{").replace("}", "}}")
            ) from None
        return value

    def parsed(self) -> Cron:
        """The checked cron expression in its time zone."""
        return Cron.parse(self.cron, self.timezone)


def names_distinct(schedules: list[ScheduleSettings]) -> list[ScheduleSettings]:
    """Refuse two schedules of one name (each names its ticks' idempotency keys)."""
    seen: set[str] = set()
    for schedule in schedules:
        if schedule.name in seen:
            raise PydanticCustomError(
                "schedule_twice", "schedule {name} is declared twice", {"name": schedule.name}
            )
        seen.add(schedule.name)
    return schedules
