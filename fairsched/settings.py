"""Settings: a TOML file (``--config`` / ``FAIRSCHED_CONFIG``), then ``FAIRSCHED_*`` variables.

Nothing is read at import time; call :func:`load_settings` when settings are needed.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from fairsched import bounds
from fairsched.errors import ConfigError, InvalidInput
from fairsched.policy.owned import (
    all_installed,
    caps_enforced,
    caps_enforcers,
    owned_attribute,
    owned_dumped,
    owned_given,
    owned_validated,
    stack_refusal,
    tenant_ordered,
    without_policy,
)
from fairsched.policy.settings import SettingLevel
from fairsched.schedules.spec import ScheduleSettings, names_distinct
from fairsched.web.settings import WebSettings

QueueName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")]
"""Queue names: letters, digits and ``_ . : -``, at most 63 characters."""


class PolicyOwning(BaseModel):
    """A settings model whose extra values are the settings the installed policies own at
    its ``_level`` (:mod:`fairsched.policy.owned`): checked by their policies, left out of a
    dump when not given, read as attributes with their policy's default."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    _level: ClassVar[SettingLevel]

    @model_validator(mode="wrap")
    @classmethod
    def _owned(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return owned_validated(cls._level, cls, data, handler)

    @model_serializer(mode="wrap")
    def _owned_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return owned_dumped(self, handler)

    if not TYPE_CHECKING:  # pydantic's own __getattr__ is hidden from type checkers too

        def __getattr__(self, name: str) -> Any:
            return owned_attribute(self, name, super().__getattr__(name))


class TenantSettings(PolicyOwning):
    """Per-tenant settings: weight and cap (weighted policy), and the tenant settings the
    installed policies own (``rate``), as extra values, ``None`` when not given.

    Ranges: :mod:`fairsched.bounds`."""

    _level = "tenant"

    weight: float = Field(1.0, ge=bounds.WEIGHT_MIN, le=bounds.WEIGHT_MAX)
    cap: int | None = Field(None, gt=0, le=bounds.CAP_MAX, description="most running jobs at once (weighted)")


PolicyName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]

LogFormat = Literal["text", "json"]
"""How log lines are written: plain text, or one JSON object a line (see :mod:`fairsched.logs`)."""
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
"""The lowest level logged."""


STORED = "stored"
"""Validation context key: the values are read from the database, not given."""


class QueueSettings(PolicyOwning):
    """Lease, runtime, retry and policy settings of one queue.

    ``policies`` is the stack the claim is composed from, e.g.
    ``["weighted", "aging", "serial"]``; ``tenants`` gives per-tenant weights and
    caps for the weighted policy (tenants not listed weigh 1). The queue settings the
    installed policies own (``aging_interval_seconds``, ``charge``, ``tenant_cap``,
    ``serial_gap``, ``serial_poison``, ``rate``: see ``docs/configuration.md``) are extra
    values, ``None`` when not given; read as attributes they give the policy's default
    then. Every number is finite and bounded (:mod:`fairsched.bounds`).
    """

    _level = "queue"

    lease_seconds: float = Field(
        30.0, gt=0, le=bounds.LEASE_MAX_SECONDS, description="lease length granted per claim/renewal"
    )
    max_runtime_seconds: float = Field(
        3600.0, gt=0, le=bounds.MAX_RUNTIME_MAX_SECONDS, description="no renewal past this per attempt"
    )
    max_attempts: int = Field(8, gt=0, le=bounds.ATTEMPTS_MAX, description="attempts before a job is dead")
    unknown_max_attempts: int = Field(
        3, gt=0, le=bounds.ATTEMPTS_MAX, description="budget for unknown errors"
    )
    backoff_base_seconds: float = Field(
        1.0, ge=0, le=bounds.BACKOFF_MAX_SECONDS, description="first retry delay ceiling"
    )
    backoff_max_seconds: float = Field(
        300.0, ge=0, le=bounds.BACKOFF_MAX_SECONDS, description="cap of any retry delay"
    )
    notify: bool = Field(True, description="pg_notify workers on enqueue")
    policies: list[PolicyName] = Field(
        default_factory=lambda: ["fifo"], min_length=1, max_length=8, description="the claim's policy stack"
    )
    policy_params: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="parameters of third-party policies"
    )
    tenants: dict[str, TenantSettings] = Field(default_factory=dict, description="weighted: per tenant")
    weight: float = Field(
        1.0, gt=0, le=1_000_000, description="share of a worker's --concurrency among its queues"
    )
    finished_retention_seconds: int = Field(
        86_400,
        ge=1,
        le=31_536_000,
        description="retention: succeeded and discarded jobs are deleted this long after they "
        "finished (1 s to 365 days; default 1 day)",
    )
    dead_retention_seconds: int = Field(
        2_592_000,
        ge=3_600,
        le=315_360_000,
        description="retention: dead jobs are deleted this long after they died, replayable until "
        "then (1 hour to 3650 days; default 30 days)",
    )
    history_retention_seconds: int = Field(
        2_592_000,
        ge=60,
        le=315_360_000,
        description="retention: attempt records and job events are deleted this long after they "
        "were written, once their job is gone (60 s to 3650 days; default 30 days)",
    )

    @field_validator("policies")
    @classmethod
    def _distinct(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("a policy appears twice")
        return names

    @field_validator("policy_params", mode="before")
    @classmethod
    def _bounded_params(cls, value: Any) -> Any:
        """Parameters are stored as JSON: finite numbers, exact integers, bounded text."""
        if isinstance(value, dict) and (problems := bounds.params_problems(value)):
            raise PydanticCustomError("params", "{problems}", {"problems": "; ".join(problems)})
        return value

    @model_validator(mode="after")
    def _stack_uses_what_is_given(self, info: ValidationInfo) -> QueueSettings:
        """Settings a policy owns, and tenants' caps, only on a stack that uses them
        (:func:`~fairsched.policy.owned.stack_refusal`)."""
        stored = bool((info.context or {}).get(STORED))
        refusal = stack_refusal(self.policies, self.tenants, self, stored=stored)
        if refusal is not None:
            raise refusal
        return self

    @classmethod
    def stored(cls, name: str, values: Mapping[str, Any], *, checked: bool = True) -> QueueSettings:
        """Queue ``name``'s settings as the database holds them (``values``, field by field).

        Values the model refuses (only a write past the database's own checks stores them)
        raise :class:`InvalidInput` naming them and the command that sets them; unchecked,
        they are taken as they are (what ``fairsched policy set`` replaces).
        """
        if not checked:
            return cls.model_construct(**values)
        try:
            return cls.model_validate(values, context={STORED: True})
        except ValidationError as e:
            raise InvalidInput(
                f"queue {name} holds invalid settings: {describe_validation_error(e)}; "
                f"set them with `fairsched policy set {name}`"
            ) from None

    @field_serializer("policy_params", "tenants")
    def _as_json(self, value: dict[str, Any] | str) -> str:
        """Stored as JSON text: the queue upsert reads it with ``::jsonb``."""
        if isinstance(value, str):
            return value
        return json.dumps(
            {k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v for k, v in value.items()}
        )


class Settings(BaseSettings):
    """Everything fairsched can be configured with."""

    model_config = SettingsConfigDict(
        env_prefix="FAIRSCHED_", env_nested_delimiter="__", extra="forbid", allow_inf_nan=False
    )

    database_url: str | None = Field(None, description="PostgreSQL DSN; embedded when unset")
    data_dir: Path | None = Field(None, description="where the embedded server keeps its data")
    max_payload_bytes: int = Field(64 * 1024, gt=0, le=64 * 1024 * 1024)
    max_error_chars: int = Field(2000, gt=0, le=100_000)
    poll_interval_seconds: float = Field(2.0, gt=0, le=bounds.PROCESS_INTERVAL_MAX_SECONDS)
    recovery_interval_seconds: float = Field(5.0, gt=0, le=bounds.PROCESS_INTERVAL_MAX_SECONDS)
    recovery_batch: int = Field(500, gt=0, le=100_000)
    head_refresh_seconds: float = Field(
        0.1,
        gt=0,
        le=bounds.PROCESS_INTERVAL_MAX_SECONDS,
        description="how often each worker raises the claim heads past claimed jobs",
    )
    reserve_fraction: float = Field(
        0.0625,
        ge=0,
        lt=1,
        description="share of a worker's slots on a weighted queue that sends NOTIFY kept free "
        "for new work (rounded down: 3 of 50 slots, none below 16)",
    )
    completion_window_seconds: float = Field(
        0.01,
        ge=0,
        le=1,
        description="a worker records finished attempts at most once per window, in one "
        "statement for all that finished meanwhile; the first after a quiet window goes at "
        "once (keep it well under the shortest lease)",
    )
    grace_period_seconds: float = Field(30.0, ge=0, le=bounds.GRACE_PERIOD_MAX_SECONDS)
    idle_in_transaction_timeout_seconds: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="the server ends any fairsched session left idle inside a transaction this "
        "long, releasing its locks (a frozen process holds nobody up longer); 0: not set",
    )
    lock_timeout_seconds: float = Field(
        5.0,
        ge=0,
        le=600,
        description="maintenance (recovery, heads refresh, config apply) and operator sessions "
        "give up a lock wait after this, and retry later; 0: not set",
    )
    operator_statement_timeout_seconds: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="operator queries (status, exporter, tenant show, simulate) are cancelled "
        "after running this long; 0: not set",
    )
    pool_max_size: int | None = Field(None, gt=0, le=bounds.POOL_MAX_SIZE, description="default: slots + 4")
    prepare_threshold: int | None = Field(
        5,
        ge=0,
        le=bounds.PREPARE_THRESHOLD_MAX,
        description='psycopg prepared statements; "off" for PgBouncer transaction mode',
    )
    log_format: LogFormat = Field("text", description="worker log lines: text, or json (one object a line)")
    log_level: LogLevel = Field("info", description="the worker's lowest level logged")
    queues: dict[QueueName, QueueSettings] = Field(default_factory=dict)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    schedules: list[ScheduleSettings] = Field(
        default_factory=list, description="periodic jobs ([[schedules]], docs/schedules.md)"
    )
    web: WebSettings = Field(default_factory=WebSettings, description="fairsched web: see docs/web.md")

    @field_validator("schedules")
    @classmethod
    def _schedule_names(cls, schedules: list[ScheduleSettings]) -> list[ScheduleSettings]:
        return names_distinct(schedules)

    @field_validator("prepare_threshold", mode="before")
    @classmethod
    def _threshold_off(cls, value: Any) -> Any:
        """``off``/``none``/``null`` (TOML and variables have no null) switch preparing off."""
        if isinstance(value, str) and value.strip().lower() in ("off", "none", "null", ""):
            return None
        return value

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        """``INFO`` and ``Json`` read as ``info`` and ``json``."""
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _tenant_owned_need_their_policy(self) -> Settings:
        """A top-level tenant's policy setting applies to the queues whose stack names the
        policy: refuse it when there is none."""
        stacks = [q.policies for q in self.queues.values()]
        for policy, keys in owned_given(self.tenants, "tenants.").items():
            if not any(policy in stack for stack in stacks):
                raise without_policy(
                    keys, f"no queue's policy stack has {policy}", f"add {policy} to a queue's policies"
                )
        capped = [t for t, s in self.tenants.items() if s.cap is not None]
        if capped and all(all_installed(q.policies) for q in self.queues.values()):
            # Inherited by the queues whose stack orders tenants and does not list the tenant.
            heirs = [n for n, q in self.queues.items() if tenant_ordered(q.policies)]
            unenforced = [n for n in heirs if not caps_enforced(self.queues[n].policies)]
            if unenforced or not heirs:
                why = (
                    f"queues {', '.join(unenforced)} order tenants but enforce no caps"
                    if unenforced
                    else ("no queue's policy stack enforces caps")
                )
                raise without_policy(
                    [("cap", f"tenants.{t}.cap") for t in capped],
                    why,
                    f"add {caps_enforcers()} to a queue's policies",
                )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit arguments win, then ``FAIRSCHED_*`` variables, then the TOML file."""
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Read settings from ``config`` (or ``$FAIRSCHED_CONFIG``), then the environment.

    Raises :class:`ConfigError` naming the file and every bad key.
    """
    raw = config if config is not None else os.environ.get("FAIRSCHED_CONFIG")
    path = Path(raw) if raw else None
    where = str(path) if path else "FAIRSCHED_* variables"
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            # Bytes, not read_text: newline translation would hide a bare carriage return.
            tomllib.loads(path.read_bytes().decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None

    class FileSettings(Settings):
        model_config = SettingsConfigDict(toml_file=path)

    try:
        return FileSettings(**overrides)
    except ValidationError as e:
        raise ConfigError(f"{where}: {describe_validation_error(e)}") from None
    except SettingsError as e:  # a FAIRSCHED_* value that is not the JSON its field needs
        raise ConfigError(f"{where}: {e}") from None


_INPUT_NOT_SHOWN = {"missing", "params", "policy_setting", "setting_without_policy", "schedule_twice"}
"""Errors whose message already says what was given (or there was nothing)."""


def describe_validation_error(error: ValidationError) -> str:
    """One line per bad key: ``queues.emails.lease_seconds: must be > 0 (got -1)``."""
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(root)"
        got = f" (got {item['input']!r})" if "input" in item and item["type"] not in _INPUT_NOT_SHOWN else ""
        lines.append(f"{key}: {item['msg']}{got}")
    return "; ".join(lines)
