"""Run mutations: per mutation a scratch copy of the checkout, its edits applied there, and
its guards run there on a database built from the copy's migrations.

The copy comes first on ``PYTHONPATH`` (its root and its ``policies/``), so the tests, the
policy entry points and the worker processes the tests start all import ``fairsched`` and
``fairsched_policies`` from it; the test template is keyed by the migrations' content, so a
mutated migration gets a template of its own (dropped after the run). A mutation is
caught when pytest exits 1 with at least one guard failed; exit 0 means it survived; any
other exit, or only errors, is an error of the harness or the catalog.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from mutation.catalog import Mutation, apply

PYTEST_TIMEOUT = 900.0
"""Seconds one pytest run of a mutation's tests may take before it counts as an error."""

_SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+)", re.MULTILINE)

_WHERE = """
import sys
from importlib.metadata import entry_points
import fairsched, fairsched_policies
policy = entry_points(group="fairsched.policies")["weighted"].load()
print(fairsched.__file__, fairsched_policies.__file__, sys.modules[policy.__module__].__file__, sep="\\n")
"""

_TEMPLATE = """
import sys
sys.path[:0] = ["tests"]
import conftest
print(f"fairsched_tpl_{conftest._migrations_hash()}")
"""


@dataclass(frozen=True)
class Outcome:
    """What running one mutation's tests showed."""

    name: str
    verdict: str
    """``caught``, ``survived`` or ``error``."""
    failed: tuple[str, ...]
    seconds: float
    detail: str = ""


@dataclass(frozen=True)
class Scratch:
    """A copy of the checkout's tracked files, and the environment that imports from it."""

    root: Path

    @property
    def env(self) -> dict[str, str]:
        paths = [str(self.root), str(self.root / "policies"), os.environ.get("PYTHONPATH", "")]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}

    def python(self, code: str) -> str:
        """Run ``code`` in the copy's environment; its output."""
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=self.root, env=self.env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"python in {self.root} failed: {done.stderr.strip()}")
        return done.stdout.strip()


def scratch_copy(root: Path, parent: Path) -> Scratch:
    """Copy the git-tracked files of ``root`` (as they are in the working tree) under ``parent``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    target = Path(tempfile.mkdtemp(prefix="checkout-", dir=parent))
    for name in filter(None, listed.decode().split("\0")):
        source = root / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return Scratch(target)


def imports_from(scratch: Scratch) -> list[str]:
    """Where the copy's environment imports ``fairsched``, ``fairsched_policies`` and a policy
    entry point from; raises unless all lie in the copy."""
    files = scratch.python(_WHERE).splitlines()
    outside = [f for f in files if not Path(f).resolve().is_relative_to(scratch.root.resolve())]
    if outside:
        raise RuntimeError(f"the scratch copy imports {outside} from outside {scratch.root}")
    return files


def pytest_run(scratch: Scratch, tests: Sequence[str]) -> tuple[int, list[str], list[str], str]:
    """Run ``tests`` in the copy, in one process: exit code, failed and errored node ids, output."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-rfE", *tests]
    try:
        done = subprocess.run(
            command,
            cwd=scratch.root,
            env=scratch.env,
            capture_output=True,
            text=True,
            timeout=PYTEST_TIMEOUT,
        )
    except subprocess.TimeoutExpired as error:
        output = error.stdout if isinstance(error.stdout, str) else ""
        return -1, [], [], output + f"\npytest ran past {PYTEST_TIMEOUT:.0f} s"
    found = _SUMMARY.findall(done.stdout)
    failed = sorted({node for kind, node in found if kind == "FAILED"})
    errored = sorted({node for kind, node in found if kind == "ERROR"})
    return done.returncode, failed, errored, done.stdout + done.stderr


def mutation_run(root: Path, parent: Path, mutation: Mutation, baseline_template: str | None) -> Outcome:
    """Apply ``mutation`` to a fresh copy of ``root`` and judge it by its guards."""
    started = time.monotonic()
    scratch = scratch_copy(root, parent)
    try:
        apply(scratch.root, mutation)
        code, failed, errored, output = pytest_run(scratch, [*mutation.guards, *mutation.keeps])
        template = scratch.python(_TEMPLATE)
        if template != baseline_template:
            template_drop(template)
    finally:
        shutil.rmtree(scratch.root, ignore_errors=True)
    return judge(mutation, code, failed, errored, output, time.monotonic() - started)


def judge(
    mutation: Mutation, code: int, failed: list[str], errored: list[str], output: str, seconds: float
) -> Outcome:
    """The verdict on a mutation from its pytest run."""
    keeps = set(mutation.keeps)
    broken_keeps = [node for node in failed + errored if node in keeps]
    caught = tuple(node for node in failed if node not in keeps)
    if broken_keeps:
        return Outcome(
            mutation.name, "error", caught, seconds, f"tests that must hold failed: {broken_keeps}"
        )
    if code == 0:
        return Outcome(mutation.name, "survived", (), seconds, "every guard passed")
    if code == 1 and caught:
        return Outcome(mutation.name, "caught", caught, seconds)
    detail = f"pytest exited {code}" + (f", errors only: {errored}" if errored else "")
    return Outcome(mutation.name, "error", caught, seconds, f"{detail}\n{_tail(output)}")


def template_drop(name: str) -> None:
    """Drop a test template a mutated migration made (``FAIRSCHED_TEST_DATABASE_URL``'s
    server; an embedded server's are left to the tests' own clean-up of stale templates)."""
    url = os.environ.get("FAIRSCHED_TEST_DATABASE_URL")
    if not url or not name.startswith("fairsched_tpl_"):
        return
    import psycopg
    from psycopg import sql

    with suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SET lock_timeout = '5s'")
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def baseline_template(scratch: Scratch) -> str:
    """The test template name of the unmutated checkout."""
    return scratch.python(_TEMPLATE)


def _tail(output: str, lines: int = 30) -> str:
    return "\n".join(output.rstrip().splitlines()[-lines:])
