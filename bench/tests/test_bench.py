"""The lab (``python -m bench``) runs its scenarios end to end on real workers and reports figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.bench import SCENARIOS, parse_backlogs, short_count
from bench.claimbench import STACKS
from fairsched.errors import InvalidInput

ENTITLED = {"w1": 12.5, "w2": 25.0, "w5": 62.5}
REPO = Path(__file__).resolve().parents[2]
"""The repository's root, where ``python -m bench`` finds the lab."""


def run_bench(server_dsn: str, *args: str) -> dict[str, object]:
    env = {**os.environ, "FAIRSCHED_DATABASE_URL": server_dsn}
    env.pop("FAIRSCHED_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--repeats", "1", "--json", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def figures_by_name(result: dict[str, object]) -> dict[str, dict[str, Any]]:
    figures = result["figures"]
    assert isinstance(figures, list)
    return {f["name"]: f for f in figures}


def test_bench_e2e_and_memory_report_measured_ratios(server_dsn: str) -> None:
    result = run_bench(
        server_dsn,
        *("--scenario", "e2e", "--scenario", "memory", "--jobs", "2000", "--slots", "16"),
        *("--large-backlog", "5000"),
    )
    figures = figures_by_name(result)
    ours = figures["fairsched jobs/s (weighted+aging+serial)"]
    plain = figures["plain SKIP LOCKED loop, 50/txn, jobs/s"]
    ratio = figures["fairsched / plain loop"]
    assert ours["median"] > 0 and plain["median"] > 0
    assert ratio["median"] == pytest.approx(ours["median"] / plain["median"], rel=1e-6)
    alone = figures["fairsched statements alone, 50/txn, no worker, jobs/s"]
    alone_ratio = figures["fairsched statements alone / plain loop"]
    assert alone["median"] > 0
    assert alone_ratio["median"] == pytest.approx(alone["median"] / plain["median"], rel=1e-6)
    # The same workers timed over their first seconds on a larger backlog, against the drain.
    large = figures["fairsched jobs/s, first 5 s on a 5,000 backlog"]
    large_ratio = figures["fairsched jobs/s, 5,000 backlog / 2,000"]
    assert large["median"] > 0
    assert large_ratio["median"] == pytest.approx(large["median"] / ours["median"], rel=1e-6)
    # The server is on this machine: the CPU per job of both runners' clients and backends.
    cpu = {
        (runner, side): figures[f"{runner} {side}, CPU ms per 1k jobs"]["median"]
        for runner, sides in (("fairsched", ("workers", "backends")), ("plain loop", ("client", "backends")))
        for side in sides
    }
    assert all(value > 0 for value in cpu.values()), cpu
    cpu_ratio = figures["fairsched / plain loop, CPU per job (clients + backends)"]["median"]
    ours_cpu = cpu["fairsched", "workers"] + cpu["fairsched", "backends"]
    plain_cpu = cpu["plain loop", "client"] + cpu["plain loop", "backends"]
    assert cpu_ratio == pytest.approx(ours_cpu / plain_cpu, rel=1e-6)
    # The peers ran their own workers on the same server (bench/requirements.txt installs them).
    for peer in ("pgqueuer", "procrastinate"):
        rate = figures[f"{peer} jobs/s"]["median"]
        assert rate > 0
        assert figures[f"fairsched / {peer}"]["median"] == pytest.approx(ours["median"] / rate, rel=1e-6)
    rss = figures["worker RSS at 64 slots"]["median"]
    assert 10 < rss < 1000
    assert "admin_dsn" not in json.dumps(result["config"])


def test_bench_churn_reports_fresh_and_churned_claim_cost(server_dsn: str) -> None:
    result = run_bench(server_dsn, "--scenario", "churn", "--churn-backlog", "2000", "--policies", "weighted")
    figures = figures_by_name(result)
    for stack in ("fifo", "weighted"):
        fresh = figures[f"{stack} buffers/claim, fresh 2,000 backlog"]["median"]
        churned = figures[f"{stack} buffers/claim after 2,000 claims+completions"]["median"]
        ratio = figures[f"{stack} buffers/claim after churn / fresh"]
        assert fresh > 0 and churned > 0
        assert ratio["median"] == pytest.approx(churned / fresh, rel=1e-6)
        assert ratio["bar"] == "<= 1.5"
        assert figures[f"{stack} claims+completions/s while churning"]["median"] > 0


def test_bench_claims_backlog_noisy_and_shares_report_their_figures_and_charts(
    server_dsn: str, tmp_path: Path
) -> None:
    plots = tmp_path / "plots"
    result = run_bench(
        server_dsn,
        *("--scenario", "claims", "--scenario", "backlog", "--scenario", "noisy", "--scenario", "shares"),
        *("--claims-backlog", "25000", "--backlogs", "5000,10000", "--noisy-seconds", "2"),
        *("--shares-claims", "400", "--slots", "16", "--plot", str(plots)),
    )
    figures = figures_by_name(result)
    # (1) every stack's claim rate against fifo's, on one backlog
    assert figures["fifo claims/s (limit 1)"]["median"] > 0
    for stack in STACKS:
        if stack != ("fifo",):
            assert figures[f"{'+'.join(stack)} / fifo claim rate"]["median"] > 0, stack
    assert figures["weighted+aging+serial / fifo claim rate"]["bar"] == ">= 0.8"
    # (2) buffers per claim and claim rate at each backlog size, and their growth
    for name in ("fifo", "weighted+aging+serial"):
        small = figures[f"{name} buffers/claim at 5,000"]["median"]
        large = figures[f"{name} buffers/claim at 10,000"]["median"]
        assert small > 0 and large > 0
        assert figures[f"{name} buffers 10k / 5k"]["median"] == pytest.approx(large / small, rel=1e-6)
        assert figures[f"{name} claims/s at 10,000"]["median"] > 0
    # (4) and (7): the small tenants' waits with and without the flood, and the flood's
    # throughput, on fairsched and on each peer's own workers (their figures are prefixed)
    for prefix in ("", "pgqueuer ", "procrastinate "):
        p99 = {
            when: figures[f"{prefix}small tenants p99 wait, {when}"]["median"]
            for when in ("no flood", "flood")
        }
        assert all(value > 0 for value in p99.values()), (prefix, p99)
        assert figures[f"{prefix}small tenants p50 wait, flood"]["median"] <= p99["flood"]
        p99_ratio = figures[f"{prefix}p99 wait flood / no flood"]
        assert p99_ratio["median"] == pytest.approx(p99["flood"] / p99["no flood"], rel=1e-6)
        assert p99_ratio["bar"] == ("<= 2" if not prefix else "")
        during, alone = (
            figures[f"{prefix}flooding tenant {when}"]["median"] for when in ("during flood", "alone")
        )
        assert during > 0 and alone > 0
        conserve = figures[f"{prefix}flood throughput during / alone"]["median"]
        assert conserve == pytest.approx(during / alone, rel=1e-6)
        # The flood outlasts the window: its rate is the workers' capacity, not its volume
        # over the window (which a flood drained early would show), and the small tenants
        # compete with it throughout.
        assert figures[f"{prefix}flood jobs unclaimed when the window ended, alone"]["median"] > 0, prefix
    # Beside fairsched's phases, the commit probe's latency and how much of the small
    # tenants' tail overlapped its stalls.
    for when in ("no flood", "flood"):
        probe_p99, slowest = (figures[f"commit probe {k}, {when}"]["median"] for k in ("p99", "slowest"))
        assert 0 < probe_p99 <= slowest, (when, probe_p99, slowest)
        stalled = figures[f"small tenants' top 1% waits met a commit over 20 ms, {when}"]
        assert 0 <= stalled["median"] <= 1 and stalled["unit"] == "share", stalled
    # (5) weights 1:2:5 under saturation: each tenant near its entitlement (fifo would give
    # the first 400 claims to w1, whose jobs were queued first)
    shares = {t: figures[f"tenant {t} share (entitled {e:.1f}%)"]["median"] for t, e in ENTITLED.items()}
    assert sum(shares.values()) == pytest.approx(100.0)
    for tenant, entitled in ENTITLED.items():
        assert abs(shares[tenant] - entitled) <= 4, shares
    # --plot: the wait distribution per tenant, and claim rate against backlog
    for chart in ("noisy_waits.png", "backlog.png"):
        assert (plots / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", chart


@pytest.mark.parametrize(
    ("backlogs", "message"),
    [
        ("10000", "give two or more sizes, ascending"),
        ("20000,10000", "give two or more sizes, ascending"),
        ("10000,10000", "give two or more sizes, ascending"),
        ("1000,10000", "each size must be at least 5,000"),
        ("10k,100k", "expected whole numbers separated by commas"),
        ("", "expected whole numbers separated by commas"),
    ],
)
def test_backlog_sizes_are_checked(backlogs: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_backlogs(backlogs)


def test_backlog_sizes_are_parsed() -> None:
    assert parse_backlogs("10000, 100_000,1000000") == (10_000, 100_000, 1_000_000)
    assert [short_count(n) for n in (10_000, 1_000_000, 2_500_000, 12_345)] == [
        "10k",
        "1M",
        "2,500k",
        "12,345",
    ]


def test_bench_refuses_an_unknown_scenario(server_dsn: str) -> None:
    env = {**os.environ, "FAIRSCHED_DATABASE_URL": server_dsn}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--scenario", "nope"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    known = ", ".join(SCENARIOS)
    assert done.stderr.strip().splitlines() == [f"error: unknown scenario nope; known: {known}"]
