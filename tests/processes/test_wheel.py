"""The release as it ships: the wheel built from exactly the container image's build
context, installed into a clean virtualenv with no source tree around, runs the
commands the image runs (migrate, config apply, a worker, the exporter) from an
application directory that has a ``policies`` package of its own, with the package
index's unrelated ``policies`` project installed beside fairsched."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import psycopg
from cli_support import REPO
from worker_support import free_port

SUCCEEDED = "SELECT count(*) FROM fairsched.jobs WHERE status = 'succeeded'"
LAB = {"soak", "peers", "claimbench", "ledger", "commitprobe", "cputime", "benchapp"}

APP = """
import policies  # the application's own package, not fairsched's built-ins

from fairsched import App, Job

assert policies.OWNER == "the application", policies.__file__
app = App()


@app.handler("emails")
def send(job: Job) -> None:
    job.progress()
"""


def build_context(target: Path) -> Path:
    """Copy what deploy/Dockerfile's build stage copies, and nothing else."""
    copies = re.findall(r"^COPY (?!--from)(.+)$", (REPO / "deploy" / "Dockerfile").read_text(), re.M)
    build_stage = [line.split()[:-1] for line in copies if "fairsched.toml" not in line]
    target.mkdir(parents=True)
    for sources in build_stage:
        for source in sources:
            path = REPO / source
            if path.is_dir():
                shutil.copytree(path, target / source, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, target / source)
    return target


def run(*args: str | Path, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_in_a_clean_venv_runs_what_the_container_runs(fresh_db: str, tmp_path: Path) -> None:
    context = build_context(tmp_path / "context")
    base_env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        tmp_path / "dist",
        context,
        cwd=tmp_path,
        env=base_env,
    )
    (wheel,) = (tmp_path / "dist").glob("fairsched-*.whl")

    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    modules = {Path(name).stem for name in names if name.endswith(".py")}
    assert "policies" not in tops and "bench" not in tops, sorted(tops)
    assert not modules & LAB, sorted(modules & LAB)
    assert "fairsched_policies/weighted.py" in names
    assert "fairsched/py.typed" in names
    assert any(name.startswith("fairsched/db/migrations/") and name.endswith(".sql") for name in names)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=base_env)
    run(venv / "bin" / "pip", "install", "-q", f"{wheel}[binary]", "policies", cwd=tmp_path, env=base_env)

    app_dir = tmp_path / "app"
    (app_dir / "policies").mkdir(parents=True)
    (app_dir / "policies" / "__init__.py").write_text('OWNER = "the application"\n')
    (app_dir / "jobs.py").write_text(APP)
    env = {**base_env, "FAIRSCHED_DATABASE_URL": fresh_db, "PYTHONPATH": str(app_dir)}
    fairsched = venv / "bin" / "fairsched"

    assert "fairsched" in run(fairsched, "--version", cwd=app_dir, env=env)
    run(fairsched, "migrate", cwd=app_dir, env=env)
    run(fairsched, "config", "apply", "--config", REPO / "config" / "fairsched.toml", cwd=app_dir, env=env)
    for n in range(5):
        run(
            fairsched,
            "enqueue",
            "--queue",
            "emails",
            "--tenant",
            "acme",
            "--payload",
            f'{{"n": {n}}}',
            cwd=app_dir,
            env=env,
        )

    worker = subprocess.Popen(
        [fairsched, "worker", "--app", "jobs:app", "--queue", "emails=2"],
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        done = 0
        while done < 5 and time.monotonic() < deadline and worker.poll() is None:
            with psycopg.connect(fresh_db) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM fairsched.jobs WHERE status = 'succeeded'"
                ).fetchone()
            done = row[0] if row else 0
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=60)[0]
    assert done == 5, output
    assert worker.returncode == 0, output

    port = free_port()
    exporter = subprocess.Popen(
        [fairsched, "exporter", "--host", "127.0.0.1", "--port", str(port)],
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = ""
        deadline = time.monotonic() + 60
        while "fairsched_build_info" not in body and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    body = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert "fairsched_build_info" in body
        assert 'queue="emails"' in body
    finally:
        exporter.send_signal(signal.SIGTERM)
        exporter.communicate(timeout=30)
