"""Bounded settings: every number a queue or tenant stores has a finite, documented range
(docs/configuration.md), refused outside it at every entry with one clear error and
nothing changed: the settings models (API, config file), the command line, the client's
own arguments, and the database's CHECK constraints (migrations/004_bounds.sql), which
also bring what earlier code wrote back into range.

The ranges are written out here as the documentation states them, not imported: a test
of what is enforced, against what is promised.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_support import cli, one_error_line
from fault_support import db_snapshot
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql
from pydantic import ValidationError
from schema_support import engine_release

from fairsched import Client, JobSpec, QueueSettings, load_settings
from fairsched.db.migrate import migrate
from fairsched.errors import ConfigError, InvalidInput
from fairsched.settings import TenantSettings

FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SOME = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

DURATIONS = {  # queue field: (low, high, low excluded), in seconds
    "lease_seconds": (0.0, 604_800.0, True),
    "max_runtime_seconds": (0.0, 604_800.0, True),
    "backoff_base_seconds": (0.0, 86_400.0, False),
    "backoff_max_seconds": (0.0, 86_400.0, False),
    "aging_interval_seconds": (0.0, 2_592_000.0, True),
}
OWNED_BY = {"aging_interval_seconds": "aging"}
"""The durations a policy owns, and that policy."""
WEIGHT = (0.001, 1_000_000.0, False)
WHOLE = {"max_attempts": (1, 1000), "unknown_max_attempts": (1, 1000), "tenant_cap": (1, 1_000_000)}
CAP = (1, 1_000_000)
EXTREMES = [math.inf, -math.inf, math.nan, 1e300, -1e300, 1e-308, 5e-324, 0.0, -0.0]


def inside(value: float, bounds: tuple[float, float, bool]) -> bool:
    low, high, low_excluded = bounds
    return (low < value if low_excluded else low <= value) and value <= high


def toml_number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


any_float = st.one_of(st.floats(), st.sampled_from(EXTREMES))


# -- the settings models: API and config file --------------------------------------------


@FEW
@given(field=st.sampled_from(sorted(DURATIONS)), value=any_float)
@example(field="lease_seconds", value=math.inf)
@example(field="max_runtime_seconds", value=1e300)
@example(field="backoff_base_seconds", value=1e300)
@example(field="lease_seconds", value=604_800.0)
@example(field="backoff_max_seconds", value=0.0)
def test_a_duration_is_accepted_exactly_within_its_range(field: str, value: float, tmp_path: Path) -> None:
    # A policy's setting (aging's interval) is given on a stack with its policy.
    stack = [OWNED_BY.get(field, "fifo")]
    path = tmp_path / "fairsched.toml"
    path.write_text(f"[queues.q]\npolicies = {stack!r}\n{field} = {toml_number(value)}\n".replace("'", '"'))
    if inside(value, DURATIONS[field]):
        assert getattr(QueueSettings(policies=stack, **{field: value}), field) == value
        assert getattr(load_settings(path).queues["q"], field) == value
    else:
        with pytest.raises(ValidationError):
            QueueSettings(policies=stack, **{field: value})
        with pytest.raises(ConfigError, match=rf"queues\.q\.{field}"):
            load_settings(path)


@FEW
@given(value=any_float)
@example(value=1e-308)
@example(value=5e-324)
@example(value=1e-320)
@example(value=0.001)
@example(value=0.0009999999999999998)
@example(value=1_000_000.0)
def test_a_weight_is_accepted_exactly_within_its_range(value: float, tmp_path: Path) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text(f"[tenants.acme]\nweight = {toml_number(value)}\n[queues.q.tenants.b]\nweight = 2\n")
    if inside(value, WEIGHT):
        assert TenantSettings(weight=value).weight == value
        assert load_settings(path).tenants["acme"].weight == value
    else:
        with pytest.raises(ValidationError):
            TenantSettings(weight=value)
        with pytest.raises(ConfigError, match=r"tenants\.acme\.weight"):
            load_settings(path)


@pytest.mark.parametrize(
    "text, key",
    [
        ("[queues.q]\ntenant_cap = 3000000000\n", "queues.q.tenant_cap"),
        ("[queues.q]\nmax_attempts = 1001\n", "queues.q.max_attempts"),
        ("[tenants.acme]\ncap = 1000001\n", "tenants.acme.cap"),
        ("[queues.q.tenants.acme]\nweight = 1e-320\n", "queues.q.tenants.acme.weight"),
        ("[queues.q]\npolicy_params = { factor = inf }\n", "queues.q.policy_params: factor: give a finite"),
        (
            "[queues.q]\npolicy_params = { n = 9007199254740993 }\n",
            "queues.q.policy_params: n: give an integer",
        ),
        (
            f"[queues.q]\npolicy_params = {{ s = '{'x' * 1001}' }}\n",
            "queues.q.policy_params: s: text of at most",
        ),
        (
            "[queues.q]\npolicy_params = { " + ", ".join(f"k{i} = 1" for i in range(65)) + " }\n",
            "queues.q.policy_params: at most 64 parameters, got 65",
        ),
        ("poll_interval_seconds = inf\n", "poll_interval_seconds"),
        ("recovery_interval_seconds = 1e300\n", "recovery_interval_seconds"),
        ("head_refresh_seconds = nan\n", "head_refresh_seconds"),
        ("grace_period_seconds = inf\n", "grace_period_seconds"),
        ("pool_max_size = 100000\n", "pool_max_size"),
        ("prepare_threshold = -1\n", "prepare_threshold"),
        ("[queues.q]\nweight = inf\n", "queues.q.weight"),
    ],
)
def test_other_numbers_of_the_config_file_are_bounded(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert f"{path}: {key}" in one_error_line_of(caught.value)


def one_error_line_of(error: Exception) -> str:
    text = str(error)
    assert "\n" not in text
    return text


def test_config_apply_of_an_unbounded_value_is_one_line_and_changes_nothing(
    client: Client, db: psycopg.Connection, tmp_path: Path
) -> None:
    before = db_snapshot(db)
    for text in ("[queues.q]\nlease_seconds = inf\n", "[queues.q.tenants.acme]\nweight = 1e-320\n"):
        path = tmp_path / "fairsched.toml"
        path.write_text(text)
        result = cli(client.dsn, "config", "apply", str(path))
        assert result.exit_code == 1 and str(path) in one_error_line(result)
    assert db_snapshot(db) == before


# -- the command line ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lease", "inf"], "queue q: lease_seconds: Input should be a finite number (got inf)"),
        (["--lease", "1e300"], "lease_seconds: Input should be less than or equal to 604800"),
        (["--max-runtime", "1e300"], "max_runtime_seconds: Input should be less than or equal to 604800"),
        (["--max-runtime", "nan"], "max_runtime_seconds: Input should be a finite number"),
        (["--backoff-base", "1e300"], "backoff_base_seconds: Input should be less than or equal to 86400"),
        (["--backoff-max", "inf"], "backoff_max_seconds: Input should be a finite number"),
        (["--aging-interval", "1e300"], "aging_interval_seconds: Input should be less than or equal to"),
        (
            ["--tenant-cap", "2000000"],
            "--tenant-cap must be a positive whole number or none (at most 1000000)",
        ),
    ],
)
def test_policy_set_refuses_unbounded_values(
    client: Client, db: psycopg.Connection, args: list[str], message: str
) -> None:
    before = db_snapshot(db)
    result = cli(client.dsn, "policy", "set", "q", *args)
    assert result.exit_code == 1, result.output
    assert message in one_error_line(result)
    assert db_snapshot(db) == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["weight", "q", "acme", "1e-308"], "weight must be a number in [0.001, 1000000], got '1e-308'"),
        (["weight", "q", "acme", "5e-324"], "weight must be a number in [0.001, 1000000]"),
        (["weight", "q", "acme", "0.0009"], "weight must be a number in [0.001, 1000000]"),
        (["weight", "q", "acme", "1000000.5"], "weight must be a number in [0.001, 1000000]"),
        (["cap", "q", "acme", "1000001"], "cap must be a positive whole number or none (at most 1000000)"),
    ],
)
def test_tenant_commands_refuse_unbounded_values(
    client: Client, db: psycopg.Connection, args: list[str], message: str
) -> None:
    before = db_snapshot(db)
    result = cli(client.dsn, "tenant", *args)
    assert result.exit_code == 1, result.output
    assert message in one_error_line(result)
    assert db_snapshot(db) == before


@SOME
@given(value=st.one_of(st.floats(min_value=1e-6, max_value=2e6), st.sampled_from(EXTREMES)))
@example(value=0.001)
@example(value=1_000_000.0)
def test_the_tenant_weight_command_takes_exactly_the_weights_in_range(
    client: Client, db: psycopg.Connection, value: float
) -> None:
    result = cli(client.dsn, "tenant", "weight", "q", "acme", repr(value))
    stored = db.execute("SELECT weight FROM fairsched.tenant_shares WHERE tenant = 'acme'").fetchone()
    if inside(value, WEIGHT):
        assert result.exit_code == 0, result.output
        assert stored == (value,)
    else:
        assert result.exit_code == 1 and "weight must be a number in" in one_error_line(result)
        assert stored is None or stored[0] != value


# -- the client's own arguments ------------------------------------------------------------


@pytest.mark.parametrize("weight", [1e-308, 5e-324, 0.0, -1.0, math.inf, math.nan, 1e7, True, "2"])
def test_set_tenant_share_refuses_weights_out_of_range(
    client: Client, db: psycopg.Connection, weight: Any
) -> None:
    before = db_snapshot(db)
    with pytest.raises(InvalidInput, match=r"weight must be a number in \[0\.001, 1000000\]"):
        client.set_tenant_share("q", "acme", weight=weight)
    with pytest.raises(InvalidInput, match=r"cap must be an integer in \[0, 1000000\]"):
        client.set_tenant_share("q", "acme", cap=1_000_001)
    assert db_snapshot(db) == before


@pytest.mark.parametrize("lease", [math.inf, 1e300, 604_800.5, math.nan, 0.0])
def test_claim_refuses_lease_lengths_out_of_range(
    client: Client, db: psycopg.Connection, lease: float
) -> None:
    client.enqueue("q", {}, tenant="t")
    before = db_snapshot(db)
    with pytest.raises(InvalidInput, match=r"lease_seconds must be a number in \(0, 604800\]"):
        client.claim("q", owner="w", lease_seconds=lease)
    assert db_snapshot(db) == before
    assert len(client.claim("q", owner="w", lease_seconds=604_800)) == 1


# -- the database's own checks -------------------------------------------------------------

COLUMNS = {
    **{f"queues.{field}": bounds for field, bounds in DURATIONS.items()},
    "tenant_shares.weight": WEIGHT,
}


@FEW
@given(column=st.sampled_from(sorted(COLUMNS)), value=any_float)
@example(column="queues.lease_seconds", value=math.inf)
@example(column="queues.max_runtime_seconds", value=math.nan)
@example(column="tenant_shares.weight", value=1e-308)
def test_the_database_refuses_a_raw_write_out_of_range(
    client: Client, db: psycopg.Connection, column: str, value: float
) -> None:
    client.set_tenant_share("q", "acme", weight=2)
    table, field = column.split(".")
    update = sql.SQL("UPDATE {} SET {} = %s").format(
        sql.Identifier("fairsched", table), sql.Identifier(field)
    )
    with db.transaction(force_rollback=True):
        if inside(value, COLUMNS[column]):
            db.execute(update, (value,))
        else:
            with pytest.raises(psycopg.errors.CheckViolation, match=f"{table}_{field}_range"):
                db.execute(update, (value,))


@pytest.mark.parametrize(
    "column, value, allowed",
    [
        *[(f"queues.{f}", v, lo <= v <= hi) for f, (lo, hi) in WHOLE.items() for v in (0, lo, hi, hi + 1)],
        *[("tenant_shares.cap", v, CAP[0] <= v <= CAP[1]) for v in (0, 1, 1_000_000, 1_000_001)],
    ],
)
def test_the_database_refuses_whole_numbers_out_of_range(
    client: Client, db: psycopg.Connection, column: str, value: int, allowed: bool
) -> None:
    client.set_tenant_share("q", "acme", weight=2)
    table, field = column.split(".")
    update = sql.SQL("UPDATE {} SET {} = %s").format(
        sql.Identifier("fairsched", table), sql.Identifier(field)
    )
    with db.transaction(force_rollback=True):
        if allowed:
            db.execute(update, (value,))
        else:
            with pytest.raises(psycopg.errors.CheckViolation, match=f"{table}_{field}_range"):
                db.execute(update, (value,))


@pytest.mark.parametrize(
    "field, value",
    [("lease_seconds", math.inf), ("max_runtime_seconds", 1e300), ("aging_interval_seconds", 1e300)],
)
def test_settings_past_the_model_are_refused_by_the_database(
    client: Client, db: psycopg.Connection, field: str, value: float
) -> None:
    broken = QueueSettings.model_construct(**{**dict(QueueSettings()), field: value})
    before = db_snapshot(db)
    with pytest.raises(InvalidInput, match=f"queues_{field}_range"):
        client.declare_queue("q", broken)
    assert db_snapshot(db) == before


# -- the migration ---------------------------------------------------------------------------


def test_the_migration_brings_what_earlier_code_wrote_into_range(empty_db: str, tmp_path: Path) -> None:
    """A database without 004 holding what the code before the bounds accepted: infinite
    and enormous durations, a weight of 1e-308 (whose claims overflowed the pass to 1e308),
    caps past a million. Once migrated, every value is in range and the queue runs.

    The rows are written with today's client, which needs the later migrations (tracing's
    column, the roles' functions; none of them depends on 004): the release has all but 004."""
    release = engine_release(tmp_path / "release_without_004", without="004_bounds")
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrate(conn, release, policies={})
    with Client(empty_db, pool_size=2) as client:
        client.declare_queue("a", QueueSettings(policies=["weighted"]))
        client.enqueue_many("a", [JobSpec({}, tenant=t) for t in ("tiny", "normal") for _ in range(3)])
        assert len(client.claim("a", owner="w", limit=2)) == 2
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute(
            """UPDATE fairsched.queues
                  SET lease_seconds = 'Infinity', max_runtime_seconds = 'NaN', backoff_base_seconds = 1e300,
                      backoff_max_seconds = 'Infinity', aging_interval_seconds = 1e300,
                      max_attempts = 5000, unknown_max_attempts = 5000, tenant_cap = 2000000000"""
        )
        conn.execute(
            "UPDATE fairsched.tenant_shares SET weight = 1e-308, pass = 1e308, cap = 2000000000"
            " WHERE tenant = 'tiny'"
        )
        conn.execute("UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second'")
        assert migrate(conn)[0] == "004_bounds"
        queue = conn.execute(
            "SELECT lease_seconds, max_runtime_seconds, backoff_base_seconds, backoff_max_seconds, "
            "aging_interval_seconds, max_attempts, unknown_max_attempts, tenant_cap FROM fairsched.queues"
        ).fetchone()
        assert queue == (604800.0, 3600.0, 86400.0, 86400.0, 2592000.0, 1000, 1000, 1000000)
        rows = conn.execute("SELECT tenant, weight, pass, cap FROM fairsched.tenant_shares").fetchall()
        shares = {tenant: values for tenant, *values in rows}
        assert (shares["tiny"][0], shares["tiny"][2]) == (0.001, 1_000_000)
        assert shares["tiny"][1] == shares["normal"][1] < 1e6
    with Client(empty_db, pool_size=2) as client:
        client.declare_queue("a", QueueSettings(backoff_base_seconds=0, backoff_max_seconds=0))
        assert client.recover().total == 2
        claimed: Counter[str] = Counter()
        for _ in range(10):
            claimed.update(lease.tenant for lease in client.claim("a", owner="w", limit=10))
        assert claimed == {"tiny": 3, "normal": 3}


@pytest.mark.parametrize(
    "variable, value",
    [
        ("STARVING_AFTER_SECONDS", "inf"),
        ("NEAR_EXPIRY_SECONDS", "1e300"),
        ("COUNT_LIMIT", "100000000000"),
        ("STATEMENT_TIMEOUT_SECONDS", "nan"),
    ],
)
def test_exporter_limits_are_bounded_and_refused_in_one_line(
    fresh_db: str, variable: str, value: str
) -> None:
    result = cli(fresh_db, "status", **{f"FAIRSCHED_EXPORTER__{variable}": value})
    assert result.exit_code == 1, result.output
    line = one_error_line(result)
    assert line.startswith("error: FAIRSCHED_EXPORTER__* variables: " + variable.lower()), line
