"""Running the ``fairsched`` command line in tests, in-process or as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from typer.testing import CliRunner, Result

from fairsched.cli.main import app

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = REPO / "config" / "fairsched.toml"


def clean_env(**values: str | None) -> dict[str, str | None]:
    """An environment override that unsets every ``FAIRSCHED_*`` variable except ``values``."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("FAIRSCHED_")}
    env.update(values)
    return env


def cli(dsn: str | None, *args: str, input: str | None = None, **env: str | None) -> Result:
    """Run the CLI in-process against ``dsn`` with a clean ``FAIRSCHED_*`` environment."""
    return CliRunner().invoke(app, list(args), input=input, env=clean_env(FAIRSCHED_DATABASE_URL=dsn, **env))


def cli_process(
    args: list[str], env: Mapping[str, str | None], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``fairsched ARGS`` as its own process with ``env`` applied to a clean environment."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    full.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run(
        [sys.executable, "-m", "fairsched", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def one_error_line(result: Result) -> str:
    """The single ``error: ...`` line of a failed command (asserts there is exactly one line)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]
