"""A schedule as a config file declares it: ``[[schedules]]`` (docs/schedules.md)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from fairsched import bounds
from fairsched.errors import InvalidInput
from fairsched.schedules.cron import Cron, zone_checked

INT32 = 2**31 - 1
ScheduleName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")]
"""Schedule names, as queue names: letters, digits and ``_ . : -``, at most 63 characters."""


def _custom(kind: str, error: InvalidInput) -> PydanticCustomError:
    return PydanticCustomError(kind, str(error).replace("{", "{{").replace("}", "}}"))


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

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        from fairsched.engine.enqueue import check_queue_name

        try:
            return check_queue_name(value)
        except InvalidInput as e:
            raise _custom("queue_name", e) from None

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        from fairsched.engine.enqueue import MAX_TENANT_CHARS, check_label

        try:
            return check_label("tenant", value, MAX_TENANT_CHARS)
        except InvalidInput as e:
            raise _custom("tenant", e) from None

    @field_validator("payload")
    @classmethod
    def _payload(cls, value: Any) -> Any:
        """JSON, within the depth and digit limits (the size limit is the applying settings')."""
        from fairsched.engine.enqueue import encode_payload

        try:
            encode_payload(value, 64 * 1024 * 1024)
        except InvalidInput as e:
            raise _custom("payload", e) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            zone_checked(value)
        except InvalidInput as e:
            raise _custom("timezone", e) from None
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str, info: ValidationInfo) -> str:
        """Checked in the schedule's time zone (UTC when that one is bad: it has its own error)."""
        try:
            Cron.parse(value, info.data.get("timezone", "UTC"))
        except InvalidInput as e:
            raise _custom("cron", e) from None
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
