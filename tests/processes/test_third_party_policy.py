"""A third-party policy as a user ships it: its own distribution (``tests/third_party_policy``,
built from its own pyproject.toml with hatchling) installed into a directory of its own,
used only by ``fairsched`` processes that have that directory on ``PYTHONPATH``; this
pytest process never imports it.

The policy, ``pause``, keeps its schema in its own migrations, recorded in
``fairsched.policy_migrations``: a claim filter that passes over the tenants it lists
(unless the queue's ``policy_params`` switch it off) and an ``on_finish`` hook that counts
finished jobs per tenant; on a weighted queue a paused tenant does not hold the others back.
Its tenant setting ``pause`` (the reason) gets the configuration file, the CLI and the
client through the generic path of every policy's settings, and a paused tenant is
reported throttled, as a rate-limited one is.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from cli_support import REPO, cli_process
from worker_support import Workers, statuses, wait_for

PACKAGE = REPO / "tests" / "third_party_policy"
MIGRATION = "001_paused_tenants"

TWO_QUEUES = """
[queues.probe]
policies = {probe}
policy_params = {{ pause_enabled = {enabled} }}
backoff_base_seconds = 0

[queues.aprobe]
policies = {aprobe}
backoff_base_seconds = 0
"""


@dataclass(frozen=True)
class Installed:
    """The policy package installed into ``target``; ``scratch`` holds configs and logs."""

    target: Path
    scratch: Path

    def env(self, dsn: str, *, with_policy: bool = True) -> dict[str, str | None]:
        """A ``fairsched`` process's environment: the test database, and the installed
        package on ``PYTHONPATH`` (or, ``with_policy=False``, nothing of it)."""
        return {"FAIRSCHED_DATABASE_URL": dsn, "PYTHONPATH": str(self.target) if with_policy else None}

    def config(self, name: str, *, probe: str, aprobe: str, enabled: str = "true") -> str:
        path = self.scratch / f"{name}.toml"
        path.write_text(TWO_QUEUES.format(probe=probe, aprobe=aprobe, enabled=enabled))
        return str(path)


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    """Build the package from its pyproject.toml (no build isolation, no index: offline)
    and install it, without dependencies, into a temporary target directory."""
    with tempfile.TemporaryDirectory(prefix="fairsched-pause-policy-") as tmp:
        target = Path(tmp) / "site"
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONPATH="")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--target",
                str(target),
                str(PACKAGE),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (
            f"building tests/third_party_policy failed (hatchling must be installed in this "
            f"environment: the build runs without isolation):\n{done.stdout}\n{done.stderr}"
        )
        yield Installed(target, scratch)


def fairsched(installed: Installed, dsn: str, *args: str, with_policy: bool = True) -> str:
    """Run ``fairsched ARGS`` as its own process; its stdout, asserting success."""
    done = cli_process(list(args), installed.env(dsn, with_policy=with_policy))
    if done.returncode != 0:
        pytest.fail(f"fairsched {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def refused(installed: Installed, dsn: str, *args: str, with_policy: bool = True) -> str:
    """Run ``fairsched ARGS`` expecting exit 1 and one error line; that line."""
    done = cli_process(list(args), installed.env(dsn, with_policy=with_policy))
    lines = done.stderr.strip().splitlines()
    if done.returncode != 1 or len(lines) != 1 or "Traceback" in done.stderr:
        pytest.fail(f"fairsched {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return lines[0]


def python(installed: Installed, code: str, *args: str) -> str:
    """Run ``python -c CODE ARGS`` with the policy installed; its stdout, asserting success."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env["PYTHONPATH"] = str(installed.target)
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"python -c ... exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def enqueue(installed: Installed, dsn: str, jobs: dict[tuple[str, str], int]) -> None:
    """Enqueue ``n`` empty jobs per ``(queue, tenant)`` through the client, in a process
    that has the policy installed (an enqueue reads the queue's stack)."""
    code = (
        "import sys, json\n"
        "from fairsched import Client, JobSpec\n"
        "with Client(sys.argv[1]) as c:\n"
        "    for queue, tenant, n in json.loads(sys.argv[2]):\n"
        "        c.enqueue_many(queue, [JobSpec({}, tenant)] * n)\n"
    )
    python(installed, code, dsn, json.dumps([[q, t, n] for (q, t), n in jobs.items()]))


def claimed_tenants(installed: Installed, dsn: str, queue: str, *, limits: list[int]) -> list[str]:
    """The tenants of the jobs claimed by one claim per limit, in a process that has the
    policy installed."""
    code = (
        "import sys, json\n"
        "from fairsched import Client\n"
        "with Client(sys.argv[1]) as c:\n"
        "    for limit in json.loads(sys.argv[3]):\n"
        "        for lease in c.claim(sys.argv[2], owner='probe', limit=limit):\n"
        "            print(lease.tenant)\n"
    )
    return python(installed, code, dsn, queue, json.dumps(limits)).split()


def done_by(db: psycopg.Connection) -> dict[tuple[str, str, str], int]:
    """Job counts by queue, tenant and status."""
    rows = db.execute(
        "SELECT queue_name, tenant, status, count(*) FROM fairsched.jobs GROUP BY 1, 2, 3"
    ).fetchall()
    return {(q, t, s): n for q, t, s, n in rows}


def schema_exists(db: psycopg.Connection) -> bool:
    row = db.execute("SELECT to_regclass('fairsched_pause.paused') IS NOT NULL").fetchone()
    return bool(row and row[0])


def test_migrate_applies_and_records_the_installed_policys_migration(
    installed: Installed, empty_db: str
) -> None:
    out = fairsched(installed, empty_db, "migrate")
    assert f"pause:{MIGRATION}" in out
    shipped = (installed.target / "fairsched_pause" / "migrations" / f"{MIGRATION}.sql").read_bytes()
    with psycopg.connect(empty_db, autocommit=True) as db:
        recorded = db.execute(
            "SELECT version, name, checksum FROM fairsched.policy_migrations WHERE policy = 'pause'"
        ).fetchall()
        assert recorded == [("001", MIGRATION, hashlib.sha256(shipped).hexdigest())]
        assert schema_exists(db)
        engine = db.execute("SELECT count(*) FROM fairsched.schema_migrations").fetchone()
        assert engine is not None and engine[0] >= 1
    assert f"pause:{MIGRATION}" not in fairsched(installed, empty_db, "migrate")


def test_the_policy_composes_with_built_ins_on_a_real_worker_and_uninstalls(
    installed: Installed, fresh_db: str, db: psycopg.Connection
) -> None:
    """``probe`` (weighted, aging, pause) lists tenant a but its params switch pausing
    off; ``aprobe`` (fifo, pause) pauses a until a's row goes."""
    fairsched(installed, fresh_db, "migrate")
    stacks = {"probe": '["weighted", "aging", "pause"]', "aprobe": '["fifo", "pause"]'}
    fairsched(installed, fresh_db, "config", "apply", installed.config("on", **stacks, enabled="false"))
    db.execute(
        "INSERT INTO fairsched_pause.paused (queue_name, tenant) VALUES ('probe', 'a'), ('aprobe', 'a')"
    )
    enqueue(installed, fresh_db, {(q, t): 6 for q in ("probe", "aprobe") for t in ("a", "b")})

    with Workers(fresh_db, installed.scratch) as workers:
        worker = workers.start({"probe": 2, "aprobe": 2}, settings={"PYTHONPATH": str(installed.target)})
        try:
            wait_for(
                lambda: (
                    done_by(db).get(("aprobe", "b", "succeeded")) == 6
                    and done_by(db).get(("probe", "a", "succeeded")) == 6
                    and done_by(db).get(("probe", "b", "succeeded")) == 6
                ),
                "probe's jobs and aprobe's tenant b's done",
                timeout=20,
            )
            time.sleep(1.0)  # five more polls: the paused tenant still gets nothing
            assert done_by(db)[("aprobe", "a", "pending")] == 6, done_by(db)
            db.execute("DELETE FROM fairsched_pause.paused WHERE queue_name = 'aprobe'")
            wait_for(
                lambda: done_by(db).get(("aprobe", "a", "succeeded")) == 6,
                "aprobe's tenant a done once unpaused",
                timeout=20,
            )
        except AssertionError as e:
            raise AssertionError(f"{e}: {done_by(db)}\n{workers.logs()}") from e
        finally:
            worker.stop()

    finished = db.execute(
        "SELECT queue_name, tenant, status, jobs FROM fairsched_pause.finished ORDER BY 1, 2, 3"
    ).fetchall()
    assert finished == [
        ("aprobe", "a", "succeeded", 6),
        ("aprobe", "b", "succeeded", 6),
        ("probe", "a", "succeeded", 6),
        ("probe", "b", "succeeded", 6),
    ]

    # Its schema cannot go while a stack names it; it goes once none does.
    line = refused(installed, fresh_db, "policy", "uninstall", "pause", "--yes")
    assert "'pause'" in line and "aprobe, probe" in line, line
    assert schema_exists(db)
    without = installed.config("off", probe='["weighted", "aging"]', aprobe='["fifo"]')
    fairsched(installed, fresh_db, "config", "apply", without)
    out = fairsched(installed, fresh_db, "policy", "uninstall", "pause", "--yes")
    assert "ran uninstall.sql" in out and MIGRATION in out, out
    assert not schema_exists(db)
    left = db.execute("SELECT count(*) FROM fairsched.policy_migrations WHERE policy = 'pause'").fetchone()
    assert left == (0,)


def test_a_paused_tenant_does_not_hold_back_a_weighted_queue(
    installed: Installed, fresh_db: str, db: psycopg.Connection
) -> None:
    fairsched(installed, fresh_db, "migrate")
    stacks = {"probe": '["weighted", "aging", "pause"]', "aprobe": '["fifo", "pause"]'}
    fairsched(installed, fresh_db, "config", "apply", installed.config("on", **stacks))
    db.execute("INSERT INTO fairsched_pause.paused (queue_name, tenant) VALUES ('probe', 'a')")
    enqueue(installed, fresh_db, {("probe", "a"): 3, ("probe", "b"): 3})
    assert claimed_tenants(installed, fresh_db, "probe", limits=[1, 1, 1]) == ["b", "b", "b"]


def test_without_the_package_a_queue_naming_the_policy_is_refused_by_name(
    installed: Installed, fresh_db: str, db: psycopg.Connection
) -> None:
    """A queue declared where the package is installed, used where it is not: its config,
    an enqueue and a worker's claims are refused with the registry's error naming the
    policy (the worker logs it, backs off and runs no job)."""
    fairsched(installed, fresh_db, "migrate")
    config = installed.config("on", probe='["weighted", "pause"]', aprobe='["fifo"]')
    fairsched(installed, fresh_db, "config", "apply", config)
    enqueue(installed, fresh_db, {("probe", "a"): 2})

    unknown = "unknown policy 'pause'"
    assert unknown in refused(installed, fresh_db, "config", "apply", config, with_policy=False)
    enqueued = refused(installed, fresh_db, "enqueue", "--queue", "probe", "--tenant", "a", with_policy=False)
    assert unknown in enqueued
    with Workers(fresh_db, installed.scratch) as workers:
        worker = workers.start({"probe": 1})
        wait_for(lambda: unknown in worker.output(), "the worker's error naming the policy", timeout=10)
        assert worker.proc.poll() is None, worker.output()
        assert statuses(db) == {"pending": 2}
        assert worker.stop() == 0, worker.output()


SETTINGS = """
[queues.probe]
policies = ["weighted", "pause"]

[queues.probe.tenants.a]
weight = 2
pause = "unpaid invoice"

[queues.plain]
policies = ["fifo"]

[tenants.b]
pause = " audit "
"""


def paused(db: psycopg.Connection) -> list[tuple[str, str, str]]:
    return db.execute(
        "SELECT queue_name, tenant, reason FROM fairsched_pause.paused ORDER BY 1, 2"
    ).fetchall()


def test_the_policys_own_setting_gets_the_config_file_cli_client_and_reports(
    installed: Installed, fresh_db: str, db: psycopg.Connection
) -> None:
    """``pause`` declares a tenant setting and a throttle and nothing else of fairsched
    knows them: the file applies, diffs and exports it (top-level tenants on the queues
    with pause only), ``policy setting`` and ``Client.set_policy_setting`` change it
    live, bad values and wrong places are refused with the policy's words, and a paused
    tenant with work is throttled in ``status`` and ``tenant show``."""
    fairsched(installed, fresh_db, "migrate")
    path = installed.scratch / "settings.toml"
    path.write_text(SETTINGS)
    fairsched(installed, fresh_db, "config", "apply", str(path))
    assert paused(db) == [("probe", "a", "unpaid invoice"), ("probe", "b", "audit")]
    assert fairsched(installed, fresh_db, "config", "diff", str(path)) == f"{path}: the database matches\n"
    fewer = installed.scratch / "fewer.toml"
    fewer.write_text(SETTINGS.replace('[tenants.b]\npause = " audit "\n', ""))
    removes = "queues.probe.tenants.b.pause: file - | database audit (config apply removes it)"
    assert fairsched(installed, fresh_db, "config", "diff", str(fewer)).splitlines() == [removes]
    exported = tomllib.loads(fairsched(installed, fresh_db, "config", "export"))
    assert exported["queues"]["probe"]["tenants"]["a"] == {"weight": 2.0, "pause": "unpaid invoice"}
    assert exported["queues"]["probe"]["tenants"]["b"] == {"weight": 1.0, "pause": "audit"}
    assert "tenants" not in exported["queues"]["plain"]

    out = fairsched(
        installed, fresh_db, "policy", "setting", "probe", "pause", "maintenance", "--tenant", "c"
    )
    assert out == "probe/c: pause maintenance\n"
    unpause = (
        "with Client(sys.argv[1]) as c:\n    c.set_policy_setting('probe', 'pause', 'off', tenant='a')\n"
    )
    python(installed, "import sys\nfrom fairsched import Client\n" + unpause, fresh_db)
    assert paused(db) == [("probe", "b", "audit"), ("probe", "c", "maintenance")]
    assert "weight 1, cap none, pause audit" in fairsched(installed, fresh_db, "policy", "show", "probe")

    before = paused(db)
    for args, code, words in [
        (("probe", "pause", "x" * 201, "--tenant", "a"), 2, "give the reason as text of 1 to 200"),
        (("probe", "pause", "x"), 2, "is set per tenant: give a tenant"),
        (("probe", "nope", "x", "--tenant", "a"), 2, "no installed policy owns a setting 'nope'"),
        (("plain", "pause", "x", "--tenant", "a"), 1, "queue plain's policy stack [fifo] has no pause"),
    ]:
        done = cli_process(["policy", "setting", *args], installed.env(fresh_db))
        lines = done.stderr.strip().splitlines()
        assert (done.returncode, len(lines)) == (code, 1) and words in lines[0], done.stderr
    path.write_text(SETTINGS + '[queues.plain.tenants.x]\npause = "x"\n')
    line = refused(installed, fresh_db, "config", "apply", str(path))
    assert "queues.plain: tenants.x.pause given, but the policy stack [fifo] has no pause" in line, line
    assert paused(db) == before

    enqueue(installed, fresh_db, {("probe", "b"): 2, ("probe", "d"): 1})
    status = json.loads(fairsched(installed, fresh_db, "status", "--json"))
    probe = next(q for q in status["queues"] if q["name"] == "probe")
    tenants = {t["tenant"]: t for t in probe["tenants"]}
    assert probe["throttled_tenants"] == 1 and tenants["b"]["throttled"] and not tenants["d"]["throttled"]
    shown = json.loads(fairsched(installed, fresh_db, "tenant", "show", "probe", "b", "--json"))
    assert (shown["pause"], shown["pause_level"], shown["throttled"]) == ("audit", 0, True)
