"""Global options: ``--config`` before the command as well as after it (the command's own wins)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_support import cli, one_error_line


def config_file(tmp_path: Path, dsn: str) -> Path:
    """A config whose database is ``dsn``: a command that ran against it read the file."""
    path = tmp_path / "fairsched.toml"
    path.write_text(f'database_url = "{dsn}"\n\n[queues.emails]\npolicies = ["weighted"]\n')
    return path


def test_config_before_the_command_is_read_by_config_check(fresh_db: str, tmp_path: Path) -> None:
    path = config_file(tmp_path, fresh_db)
    result = cli(None, "--config", str(path), "config", "check", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["queues"] == ["emails"]


def test_config_before_the_command_is_read_by_status(fresh_db: str, tmp_path: Path) -> None:
    path = config_file(tmp_path, fresh_db)
    before = cli(None, "--config", str(path), "status", "--json")
    assert before.exit_code == 0, before.output
    after = cli(None, "status", "--json", "--config", str(path))
    assert after.exit_code == 0, after.output
    names = [[q["name"] for q in json.loads(r.stdout)["queues"]] for r in (before, after)]
    assert names[0] == names[1]


def test_the_commands_own_config_wins_over_the_one_before_it(fresh_db: str, tmp_path: Path) -> None:
    path = config_file(tmp_path, fresh_db)
    missing = tmp_path / "missing.toml"
    result = cli(None, "--config", str(path), "status", "--config", str(missing))
    assert result.exit_code == 1
    assert "missing.toml: config file not found" in one_error_line(result)
    result = cli(None, "--config", str(missing), "status", "--json", "--config", str(path))
    assert result.exit_code == 0, result.output


def test_config_before_the_command_wins_over_the_environment(fresh_db: str, tmp_path: Path) -> None:
    path = config_file(tmp_path, fresh_db)
    missing = tmp_path / "missing.toml"
    result = cli(None, "--config", str(path), "status", "--json", FAIRSCHED_CONFIG=str(missing))
    assert result.exit_code == 0, result.output


def test_debug_after_the_command_shows_the_failure_as_before_it(tmp_path: Path) -> None:
    """Without --debug a failure is one line; with it, before or after the command, the
    exception comes through (a traceback in a terminal)."""
    missing = str(tmp_path / "nope.toml")
    plain = cli(None, "config", "check", missing)
    assert plain.exit_code == 1
    assert plain.exception is None or isinstance(plain.exception, SystemExit)
    for args in (("--debug", "config", "check", missing), ("config", "check", missing, "--debug")):
        result = cli(None, *args)
        assert result.exit_code == 1, (args, result.output)
        assert result.exception is not None and not isinstance(result.exception, SystemExit), args
        assert "config file not found" in str(result.exception)
