"""The settings and throttles the installed policies own, found by name through the
registry: what the settings models, ``config apply``/``diff``/``export``, the CLI, the
client and the reports use instead of naming a policy.

A policy's settings are extra values of :class:`~fairsched.settings.QueueSettings` and
:class:`~fairsched.settings.TenantSettings` (``None`` when not given; read as attributes,
the default the policy declares), checked here by the policy that declares them. A value
equal to that default counts as none: it needs no policy in the stack.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg import sql
from pydantic import BaseModel, SerializerFunctionWrapHandler, ValidationError, ValidatorFunctionWrapHandler
from pydantic_core import InitErrorDetails, PydanticCustomError

from fairsched.errors import ConfigError, InvalidInput
from fairsched.policy.interface import Policy
from fairsched.policy.settings import Setting, SettingLevel, Throttle

OFF = "off"
"""The value that removes a setting."""

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Owned:
    """A setting and the policy that declares it."""

    policy: str
    setting: Setting

    @property
    def name(self) -> str:
        return self.setting.name


def _installed() -> Mapping[str, Policy]:
    """The registry's policies (imported when asked for: the settings models import this
    module, and the registry's own imports need them)."""
    from fairsched.policy.registry import registry

    return registry()


def all_installed(policies: Sequence[str]) -> bool:
    """Whether every policy named is installed."""
    return set(policies) <= _installed().keys()


def tenant_ordered(policies: Sequence[str]) -> bool:
    """Whether a policy of the stack orders tenants (names not installed count for nothing)."""
    known = _installed()
    return any(known[n].tenant_order() is not None for n in policies if n in known)


def caps_enforced(policies: Sequence[str]) -> bool:
    """Whether the stack enforces tenants' caps: its tenant order does
    (:attr:`~fairsched.policy.TenantOrder.caps`; names not installed count for nothing)."""
    known = _installed()
    orders = [known[n].tenant_order() for n in policies if n in known]
    return any(order is not None and order.caps for order in orders)


def caps_enforcers() -> str:
    """The installed policies whose tenant order enforces caps, for messages: ``weighted``."""
    found = [name for name in sorted(_installed()) if caps_enforced([name])]
    return " or ".join(found) or "a policy whose tenant order enforces caps"


def caps_refused(queue: str, policies: Sequence[str]) -> InvalidInput:
    """The error of a cap given to a queue whose stack enforces none."""
    return InvalidInput(
        f"queue {queue}'s policy stack [{', '.join(policies)}] enforces no caps, so a cap would not "
        f"shape its claims: add {caps_enforcers()} to its policies first (a cap of 0 or none removes one)"
    )


def owned_settings() -> dict[str, Owned]:
    """Every setting the installed policies declare, by name (sorted); refuses a name that
    is not a lower-case key, that two policies declare, or that a queue's or tenant's
    settings use themselves."""
    from fairsched.settings import QueueSettings, TenantSettings

    taken = QueueSettings.model_fields.keys() | TenantSettings.model_fields.keys()
    found: dict[str, Owned] = {}
    for policy_name, policy in sorted(_installed().items()):
        for setting in policy.settings():
            name = setting.name
            if not _NAME.match(name) or name in taken:
                raise ConfigError(
                    f"policy {policy_name!r} declares a setting {name!r}, which is not a free key"
                )
            if name in found:
                raise ConfigError(
                    f"policies {found[name].policy!r} and {policy_name!r} both declare a setting {name!r}"
                )
            if not setting.levels or not set(setting.levels) <= {"queue", "tenant"}:
                raise ConfigError(f"policy {policy_name!r}: setting {name!r} has levels {setting.levels!r}")
            found[name] = Owned(policy_name, setting)
    return dict(sorted(found.items()))


def stack_settings(policies: Sequence[str]) -> list[Owned]:
    """The settings owned by the policies of a stack, by name."""
    return [o for o in owned_settings().values() if o.policy in policies]


def owned_setting(name: str) -> Owned:
    """The setting called ``name``; :class:`InvalidInput` naming the known ones otherwise."""
    found = owned_settings()
    if name not in found:
        raise InvalidInput(
            f"no installed policy owns a setting {name!r} (settings: {', '.join(found) or 'none'})"
        )
    return found[name]


def value_parsed(owned: Owned, value: object) -> Any:
    """A value in its stored form (of the setting's type), ``None`` for ``None`` or
    ``"off"``; :class:`InvalidInput` with the policy's message for anything it refuses."""
    if value is None or (isinstance(value, str) and value.strip().lower() == OFF):
        return None
    try:
        return owned.setting.parse(value)
    except ValueError as e:
        raise InvalidInput(str(e)) from None


def throttles(policies: Sequence[str] | None = None) -> list[tuple[str, Throttle]]:
    """``(policy, throttle)`` of every installed policy that reports throttled tenants
    (only the policies of ``policies``, when given)."""
    found = [(name, p.throttle()) for name, p in sorted(_installed().items())]
    return [(name, t) for name, t in found if t is not None and (policies is None or name in policies)]


def level_signature(throttle: Throttle) -> str:
    """The level function as ``to_regprocedure`` reads it: ``"schema"."name"(text, text)``."""
    return f"{throttle.level.as_string(None)}(text, text)"


def level_query(template: LiteralString, throttle: Throttle) -> sql.Composed:
    """A named query whose ``{level}`` is the throttle's level function."""
    return sql.SQL(template).format(level=throttle.level)


# -- the settings models --------------------------------------------------------------


def owned_value(model: BaseModel, name: str) -> Any:
    """The value a queue's or tenant's settings give a policy's setting (``None``: none, or
    the value its policy declares the default)."""
    value = (model.model_extra or {}).get(name)
    owned = owned_settings().get(name)
    return None if owned is not None and value == owned.setting.default else value


def given_fields(model: BaseModel) -> set[str]:
    """The fields and policies' settings ``model`` was given (``"off"`` included), also when
    it was built unchecked (``model_construct`` leaves its extra values out of
    ``model_fields_set``)."""
    extra = model.model_extra or {}
    return model.model_fields_set | {name for name, value in extra.items() if value is not None}


def owned_effective(model: BaseModel, name: str) -> Any:
    """The value of a policy's setting on a queue or tenant: the one given, else the
    default its policy declares."""
    value = owned_value(model, name)
    return owned_setting(name).setting.default if value is None else value


def owned_attribute(model: BaseModel, name: str, value: Any) -> Any:
    """``value``, the attribute ``name`` the settings model found, or for a policy's
    setting given no value the default its policy declares."""
    if value is None and name in owned_settings():
        return owned_effective(model, name)
    return value


def owned_validated(
    level: SettingLevel, model: type[BaseModel], data: Any, handler: ValidatorFunctionWrapHandler
) -> Any:
    """Validate ``model``'s own fields through ``handler`` and, beside them, the settings
    the installed policies own at ``level`` (each parsed by its policy, whose message
    says what is wrong, the type included; a key neither knows is refused), every bad
    key in one :class:`ValidationError`."""
    if not isinstance(data, dict):
        return handler(data)
    owned = {n: o for n, o in owned_settings().items() if level in o.setting.levels}
    fields: dict[str, Any] = {}
    errors: list[InitErrorDetails] = []
    for key, value in data.items():
        if key in model.model_fields:
            fields[key] = value
        elif key not in owned:
            errors.append(InitErrorDetails(type="extra_forbidden", loc=(key,), input=value))
        else:
            try:
                fields[key] = value_parsed(owned[key], value)
            except InvalidInput as e:
                message = str(e).removeprefix(f"{key}: ")  # the error's key names it already
                error = PydanticCustomError("policy_setting", message)
                errors.append(InitErrorDetails(type=error, loc=(key,), input=value))
    try:
        validated = handler(fields)
    except ValidationError as e:
        theirs = [
            InitErrorDetails(type=PydanticCustomError(d["type"], d["msg"]), loc=d["loc"], input=d["input"])
            for d in e.errors()
        ]
        raise ValidationError.from_exception_data(e.title, [*theirs, *errors]) from None
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)
    extra = validated.__pydantic_extra__
    for name in owned:
        extra.setdefault(name, None)
    return validated


def owned_dumped(model: BaseModel, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
    """``model`` dumped without the policies' settings it gives no value."""
    dumped: dict[str, Any] = handler(model)
    for name, value in (model.model_extra or {}).items():
        if value is None:
            dumped.pop(name, None)
    return dumped


def owned_given(
    tenants: Mapping[str, BaseModel], prefix: str, queue: BaseModel | None = None
) -> dict[str, list[tuple[str, str]]]:
    """The policies' settings given a value, as ``(name, key)`` pairs per owning policy:
    the queue's (``queue``) first, then each tenant's (key: ``prefix`` tenant ``.`` name)."""
    given: dict[str, list[tuple[str, str]]] = {}
    for name, owned in owned_settings().items():
        keys = [name] if queue is not None and owned_value(queue, name) is not None else []
        keys += [f"{prefix}{t}.{name}" for t, s in tenants.items() if owned_value(s, name) is not None]
        given.setdefault(owned.policy, []).extend((name, key) for key in keys)
    return {policy: pairs for policy, pairs in given.items() if pairs}


def without_policy(given: Sequence[tuple[str, str]], why: str, fix: str) -> PydanticCustomError:
    """The error of policy settings given where their policy does not apply."""
    names = ", ".join(dict.fromkeys(name for name, _key in given))
    return PydanticCustomError(
        "setting_without_policy",
        "{keys} given, but {why}: {fix} or remove the {names}",
        {"keys": ", ".join(key for _name, key in given), "why": why, "fix": fix, "names": names},
    )


def stack_refusal(
    policies: Sequence[str], tenants: Mapping[str, BaseModel], queue: BaseModel, *, stored: bool
) -> PydanticCustomError | None:
    """Why a queue's settings give what its stack does not use, or ``None``: a setting a
    policy owns on a stack without that policy; a tenant's cap on a stack that enforces
    no caps, unless ``stored`` (read from the database: caps set before they were refused
    stay readable). A stack naming a policy that is not installed is refused apart, as
    unknown."""
    if not all_installed(policies):
        return None
    stack = f"the policy stack [{', '.join(policies)}]"
    for policy, keys in owned_given(tenants, "tenants.", queue=queue).items():
        if policy not in policies:
            return without_policy(keys, f"{stack} has no {policy}", f"add {policy} to policies")
    capped = [t for t, s in tenants.items() if getattr(s, "cap", None) is not None]
    if capped and not stored and not caps_enforced(policies):
        given = [("cap", f"tenants.{t}.cap") for t in capped]
        return without_policy(given, f"{stack} enforces no caps", f"add {caps_enforcers()} to policies")
    return None
