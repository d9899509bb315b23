"""The faces of the ratelimit policy: rates in the config file (load, apply, diff, export),
the client's live rate changes as claims see them, and throttled tenants reported apart
from starving ones by the exporter and ``status``."""

from __future__ import annotations

import time
import tomllib
from collections import Counter
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from cli_support import cli, one_error_line
from ops_support import config_state
from policies_support import declare, fill
from prometheus_client import CollectorRegistry

from fairsched import Client, QueueSettings, Settings
from fairsched.config import sync as configsync
from fairsched.config.compare import diff, export_toml
from fairsched.config.policysettings import stored_values
from fairsched.config.rates import RATE
from fairsched.errors import ConfigError, InvalidInput, UnknownQueue
from fairsched.observe.exporter import ClusterCollector
from fairsched.observe.snapshot import ExporterSettings
from fairsched.observe.status import read_status
from fairsched.policy.owned import owned_setting
from fairsched.settings import TenantSettings, load_settings

CONFIG = """
[queues.api]
policies = ["weighted", "ratelimit"]
rate = "100/s"

[queues.api.tenants.acme]
weight = 2
rate = "5/s"

[queues.api.tenants.initech]
rate = "3/m"

[queues.plain]
policies = ["fifo"]

[tenants.globex]
rate = "2/h"

[tenants.acme]
rate = "7/d"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fairsched.toml"
    path.write_text(text, "utf-8")
    return path


def stored(db: psycopg.Connection) -> list[tuple[object, ...]]:
    """Every limit as (queue, tenant, jobs, period); tenant '' is the queue's default."""
    return db.execute(
        "SELECT queue_name, tenant, jobs, period_seconds::int FROM fairsched.ratelimits"
        " WHERE jobs IS NOT NULL ORDER BY 1, 2"
    ).fetchall()


def rate_state(db: psycopg.Connection) -> dict[str, list[tuple[object, ...]]]:
    state: dict[str, list[tuple[object, ...]]] = config_state(db)
    return state | {"rates": stored(db)}


# -- config file -------------------------------------------------------------------------------

BAD_RATES = ["0/s", "-5/s", "inf/s", "nan/m", "1e3/s", "1.5/s", "5/x", "5/sec", "5", "fast", "", "2000000/s"]


@pytest.mark.parametrize("rate", BAD_RATES)
@pytest.mark.parametrize("where", ["queues.api.rate", "queues.api.tenants.acme.rate", "tenants.acme.rate"])
def test_a_bad_rate_is_one_config_error_naming_file_and_key(tmp_path: Path, where: str, rate: str) -> None:
    text = '[queues.api]\npolicies = ["ratelimit"]\n'
    if where == "queues.api.rate":
        text += f'rate = "{rate}"\n'
    elif where.startswith("queues."):
        text += f'[queues.api.tenants.acme]\nrate = "{rate}"\n'
    else:
        text += f'[tenants.acme]\nrate = "{rate}"\n'
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: {where}: rate ") and "N/s, N/m, N/h or N/d" in message
    assert "\n" not in message


def test_a_rate_that_is_not_a_string_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, '[queues.api]\npolicies = ["ratelimit"]\nrate = 50\n')
    with pytest.raises(ConfigError, match=r"queues\.api\.rate: give a rate as a string, e.g\. \"50/s\""):
        load_settings(path)


def test_off_and_spacing_normalise(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[queues.api]\npolicies = ["ratelimit"]\nrate = " 50 / s "\n[queues.api.tenants.a]\nrate = "OFF"\n',
    )
    queue = load_settings(path).queues["api"]
    assert queue.rate == "50/s" and queue.tenants["a"].rate is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[queues.p]\nrate = "5/s"\n', "queues.p: rate given, but the policy stack [fifo] has no ratelimit"),
        (
            '[queues.p]\npolicies = ["weighted"]\n[queues.p.tenants.a]\nrate = "5/s"\n',
            "queues.p: tenants.a.rate given, but the policy stack [weighted] has no ratelimit",
        ),
        (
            '[queues.p]\npolicies = ["weighted"]\n[tenants.a]\nrate = "5/s"\n',
            "tenants.a.rate given, but no queue's policy stack has ratelimit",
        ),
    ],
)
def test_a_rate_without_ratelimit_in_the_stack_is_refused(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match="add ratelimit to") as raised:
        load_settings(write(tmp_path, text))
    assert expected in str(raised.value)


def test_config_apply_of_a_bad_rate_changes_nothing(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    assert cli(fresh_db, "config", "apply", str(write(tmp_path, CONFIG))).exit_code == 0
    before = rate_state(db)
    broken = CONFIG.replace('rate = "3/m"', 'rate = "0/m"').replace('rate = "100/s"', 'rate = "200/s"')
    result = cli(fresh_db, "config", "apply", str(write(tmp_path, broken)))
    assert result.exit_code == 1
    assert "queues.api.tenants.initech.rate: rate '0/m'" in one_error_line(result)
    assert rate_state(db) == before


def test_apply_diff_and_export_round_trip_rates(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = write(tmp_path, CONFIG)
    before = cli(fresh_db, "config", "diff", str(path))
    assert "queues.api: file declared | database -" in before.stdout

    assert cli(fresh_db, "config", "apply", str(path)).exit_code == 0, "apply"
    # The queue's default, its tenants' own rates, and the top-level globex on the ratelimit
    # queue only; acme's own entry wins over the top-level one.
    assert stored(db) == [
        ("api", "", 100, 1),
        ("api", "acme", 5, 1),
        ("api", "globex", 2, 3600),
        ("api", "initech", 3, 60),
    ]
    assert cli(fresh_db, "config", "diff", str(path)).stdout == f"{path}: the database matches\n"

    exported = cli(fresh_db, "config", "export").stdout
    parsed = tomllib.loads(exported)
    api = parsed["queues"]["api"]
    assert api["rate"] == "100/s" and api["tenants"]["acme"] == {"weight": 2.0, "rate": "5/s"}
    assert api["tenants"]["globex"] == {"weight": 1.0, "rate": "2/h"}
    assert "rate" not in parsed["queues"]["plain"]

    # The export applies back to the same rates and exports the same text.
    again = write(tmp_path, exported)
    assert cli(fresh_db, "config", "apply", str(again)).exit_code == 0
    assert stored(db) == [
        ("api", "", 100, 1),
        ("api", "acme", 5, 1),
        ("api", "globex", 2, 3600),
        ("api", "initech", 3, 60),
    ]
    assert _body(cli(fresh_db, "config", "export").stdout) == _body(exported)
    assert cli(fresh_db, "config", "diff", str(again)).stdout == f"{again}: the database matches\n"


def _body(export: str) -> str:
    """An export without its timestamped first line."""
    return export.split("\n", 1)[1]


def test_reapply_removes_rates_no_longer_in_the_file(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    assert cli(fresh_db, "config", "apply", str(write(tmp_path, CONFIG))).exit_code == 0
    fewer = CONFIG.replace('rate = "100/s"\n', "").replace('rate = "3/m"\n', "")
    fewer = fewer.replace('[tenants.globex]\nrate = "2/h"\n', "")
    path = write(tmp_path, fewer)
    shown = cli(fresh_db, "config", "diff", str(path)).stdout.splitlines()
    assert "queues.api.rate: file - | database 100/s (config apply removes it)" in shown
    assert "queues.api.tenants.initech.rate: file - | database 3/m (config apply removes it)" in shown
    assert "queues.api.tenants.globex.rate: file - | database 2/h (config apply removes it)" in shown
    assert not [line for line in shown if "tenants.initech:" in line or "tenants.globex:" in line]

    assert cli(fresh_db, "config", "apply", str(path)).exit_code == 0
    assert stored(db) == [("api", "acme", 5, 1)]
    assert cli(fresh_db, "config", "diff", str(path)).stdout == f"{path}: the database matches\n"
    # --prune has no rate-only tenant settings to remove.
    assert cli(fresh_db, "config", "apply", str(path), "--prune", "--dry-run").stdout == (
        "dry run: nothing changed\n"
    )

    # A stack without ratelimit gives no rates: applying it removes the queue's rates.
    no_limit = fewer.replace('["weighted", "ratelimit"]', '["weighted"]').replace('rate = "5/s"\n', "")
    no_limit = no_limit.replace('[tenants.acme]\nrate = "7/d"\n', "")
    assert cli(fresh_db, "config", "apply", str(write(tmp_path, no_limit))).exit_code == 0
    assert stored(db) == []


def test_diff_in_the_api_names_changed_rates(fresh_db: str, db: psycopg.Connection, tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, CONFIG))
    with Client(fresh_db, settings=settings) as client, client.connection() as conn:
        configsync.apply(conn, settings)
        changed = settings.model_copy(deep=True)
        changed.queues["api"].tenants["acme"] = TenantSettings(weight=2, rate="6/s")
        lines = [d.line() for d in diff(changed, configsync.database_settings(conn))]
        assert lines == ["queues.api.tenants.acme.rate: file 6/s | database 5/s"]
        exported = export_toml(configsync.database_settings(conn))
    assert 'rate = "3/m"' in exported


# -- the client -------------------------------------------------------------------------------


def test_the_client_sets_and_removes_rates(client: Client, db: psycopg.Connection) -> None:
    declare(client, "rl", ["ratelimit"])
    client.set_queue_rate("rl", "10/m")
    client.set_tenant_rate("rl", "acme", " 2 / s ")
    assert stored(db) == [("rl", "", 10, 60), ("rl", "acme", 2, 1)]
    client.set_tenant_rate("rl", "acme", "off")
    client.set_queue_rate("rl", None)
    assert stored(db) == []


@pytest.mark.parametrize("rate", [*BAD_RATES, 5, 1.5])
def test_the_client_refuses_bad_rates_and_changes_nothing(
    client: Client, db: psycopg.Connection, rate: object
) -> None:
    declare(client, "rl", ["ratelimit"])
    client.set_tenant_rate("rl", "acme", "3/s")
    before = rate_state(db)
    with pytest.raises(InvalidInput, match="N/s, N/m, N/h or N/d"):
        client.set_tenant_rate("rl", "acme", rate)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="N/s, N/m, N/h or N/d"):
        client.set_queue_rate("rl", rate)  # type: ignore[arg-type]
    assert rate_state(db) == before


def test_the_client_refuses_queues_without_ratelimit(client: Client, db: psycopg.Connection) -> None:
    declare(client, "w", ["weighted"])
    before = rate_state(db)
    with pytest.raises(InvalidInput, match=r"queue w's policy stack \[weighted\] has no ratelimit"):
        client.set_tenant_rate("w", "acme", "5/s")
    with pytest.raises(InvalidInput, match="has no ratelimit"):
        client.set_queue_rate("w", "5/s")
    with pytest.raises(UnknownQueue):
        client.set_tenant_rate("nope", "acme", "5/s")
    with pytest.raises(InvalidInput, match="tenant"):
        client.set_tenant_rate("w", "", "5/s")
    assert rate_state(db) == before


def test_declaring_a_queue_writes_the_rates_it_was_given(client: Client, db: psycopg.Connection) -> None:
    given = QueueSettings(policies=["ratelimit"], rate="4/s", tenants={"a": TenantSettings(rate="1/h")})
    client.declare_queue("rl", given)
    assert stored(db) == [("rl", "", 4, 1), ("rl", "a", 1, 3600)]
    # Changing another setting keeps the rates; rates given again replace them.
    client.declare_queue("rl", QueueSettings(lease_seconds=60))
    assert stored(db) == [("rl", "", 4, 1), ("rl", "a", 1, 3600)]
    again = QueueSettings(policies=["ratelimit"], rate="off", tenants={"a": TenantSettings(rate="2/h")})
    client.declare_queue("rl", again)
    assert stored(db) == [("rl", "a", 2, 3600)]


def claims_during(client: Client, queue: str, seconds: float, *, most: int | None = None) -> Counter[str]:
    """Claim one job at a time (completing it) for ``seconds``, or until ``most`` claims;
    the claims per tenant."""
    taken: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (most is None or taken.total() < most):
        leases = client.claim(queue, owner="t", limit=1)
        if not leases:
            time.sleep(0.01)
            continue
        taken[leases[0].tenant] += 1
        client.complete_many(leases)
    return taken


@pytest.mark.parametrize("policies", [["ratelimit"], ["weighted", "ratelimit"]])
def test_a_live_rate_change_applies_to_the_next_claims(client: Client, policies: list[str]) -> None:
    declare(client, "rl", policies)
    for _ in range(5):  # interleaved backlogs: the claim must walk past a throttled tenant
        fill(client, "rl", "acme", 40)
        fill(client, "rl", "globex", 40)
    # Unthrottled, both are claimed: within 80 claims, however long they take on a busy machine.
    assert set(claims_during(client, "rl", 60.0, most=80)) == {"acme", "globex"}

    client.set_tenant_rate("rl", "acme", "1/s")
    taken = claims_during(client, "rl", 1.0)
    assert taken["acme"] <= 2, taken  # the bucket's one token, and at most one refill
    assert taken["globex"] >= 20, taken

    client.set_tenant_rate("rl", "acme", "off")
    taken = claims_during(client, "rl", 0.5)
    assert taken["acme"] >= 5, taken

    client.set_queue_rate("rl", "1/h")  # the default holds back every tenant without its own
    claims_during(client, "rl", 0.2)
    assert claims_during(client, "rl", 0.3) == Counter()


# -- throttled is not starving ------------------------------------------------------------------


def throttled_queue(client: Client, db: psycopg.Connection) -> None:
    """Queue rl: ``slow`` (1/h, its token spent) and ``hungry`` (no limit) both with work
    claimable for minutes; queue q: ``late``, claimable for minutes."""
    declare(client, "rl", ["ratelimit"])
    client.set_tenant_rate("rl", "slow", "1/h")
    now = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    for tenant, age in (("slow", 300), ("slow", 290), ("hungry", 200)):
        client.enqueue("rl", {}, tenant=tenant, run_at=now - timedelta(seconds=age))
    client.enqueue("q", {}, tenant="late", run_at=now - timedelta(seconds=250))
    (lease,) = client.claim("rl", owner="t")
    assert lease.tenant == "slow"


def scrape(dsn: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    collector = ClusterCollector(dsn, Settings(), ExporterSettings(starving_after_seconds=60))
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
        }
    finally:
        collector.close()


def gauge(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_the_exporter_reports_throttled_tenants_apart_from_starving_ones(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    throttled_queue(client, db)
    s = scrape(fresh_db)
    assert gauge(s, "fairsched_queue_starving_tenants", queue="rl") == 1
    assert gauge(s, "fairsched_queue_throttled_tenants", queue="rl") == 1
    assert gauge(s, "fairsched_tenant_oldest_claimable_age_seconds", queue="rl", tenant="slow") == 0
    assert gauge(s, "fairsched_tenant_throttled_oldest_seconds", queue="rl", tenant="slow") >= 290
    assert gauge(s, "fairsched_tenant_oldest_claimable_age_seconds", queue="rl", tenant="hungry") >= 200
    assert gauge(s, "fairsched_tenant_throttled_oldest_seconds", queue="rl", tenant="hungry") == 0
    assert gauge(s, "fairsched_queue_starving_tenants", queue="q") == 1
    assert gauge(s, "fairsched_queue_throttled_tenants", queue="q") == 0

    client.set_tenant_rate("rl", "slow", "off")  # no longer held back: starving again
    s = scrape(fresh_db)
    assert gauge(s, "fairsched_queue_starving_tenants", queue="rl") == 2
    assert gauge(s, "fairsched_queue_throttled_tenants", queue="rl") == 0
    assert gauge(s, "fairsched_tenant_oldest_claimable_age_seconds", queue="rl", tenant="slow") >= 290


def test_status_marks_throttled_tenants_and_counts_them_apart(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    throttled_queue(client, db)
    with client.connection() as conn:
        report = read_status(conn, Settings(), ExporterSettings(starving_after_seconds=60))
    rl = next(q for q in report.queues if q.name == "rl")
    assert (rl.starving_tenants, rl.throttled_tenants) == (1, 1)
    tenants = {t.tenant: t for t in rl.tenants}
    assert tenants["slow"].throttled and tenants["slow"].throttled_oldest_age_seconds >= 290
    assert tenants["slow"].oldest_claimable_age_seconds == 0
    assert not tenants["hungry"].throttled and tenants["hungry"].oldest_claimable_age_seconds >= 200

    table = cli(fresh_db, "status")
    assert table.exit_code == 0, table.output
    assert "throttled" in table.stdout and "yes (" in table.stdout


def test_reports_work_without_the_ratelimit_table(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    throttled_queue(client, db)
    db.execute("DROP TABLE fairsched.ratelimits CASCADE")
    db.execute("DROP FUNCTION fairsched.ratelimit_budget(text, text), fairsched.ratelimit_level(text, text)")
    s = scrape(fresh_db)
    assert gauge(s, "fairsched_exporter_scrape_success") == 1
    assert gauge(s, "fairsched_queue_starving_tenants", queue="rl") == 2
    assert gauge(s, "fairsched_queue_throttled_tenants", queue="rl") == 0
    with client.connection() as conn:
        assert read_status(conn, Settings(), ExporterSettings()).queues
        assert configsync.database_settings(conn)["rl"].rate is None
        assert stored_values(conn, owned_setting(RATE)) == {}
    with pytest.raises(Exception, match="run `fairsched migrate`"):
        client.set_tenant_rate("rl", "slow", "5/s")
