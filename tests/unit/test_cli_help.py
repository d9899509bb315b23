"""The command line's own texts: ``--version`` and every command's ``--help``, as plain text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from cli_support import cli

import fairsched
from fairsched.cli.main import app
from fairsched.engine.retry import error_code
from fairsched.errors import RetryableError


def command_paths() -> Iterator[list[str]]:
    """Every command and group of the app, as the words that name it (the root is [])."""

    def walk(command: object, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


def test_version_prints_the_package_version() -> None:
    result = cli(None, "--version")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"fairsched {fairsched.__version__}\n"


@pytest.mark.parametrize("path", list(command_paths()), ids=lambda p: " ".join(p) or "fairsched")
def test_no_help_text_shows_rest_markup(path: list[str]) -> None:
    result = cli(None, *path, "--help")
    assert result.exit_code == 0, result.output
    for markup in ("``", ":class:", ":func:", ":data:", ":meth:"):
        assert markup not in result.stdout, result.stdout


def test_dead_list_code_help_names_the_codes_the_filter_matches() -> None:
    """Codes are what the worker stores: the exception's module and qualified class name."""
    result = cli(None, "dead", "list", "--help", COLUMNS="200")
    assert result.exit_code == 0, result.output
    assert error_code(RetryableError("boom")) == "fairsched.errors.RetryableError"
    assert "fairsched.errors.RetryableError" in result.stdout
    assert "qualified class name" in result.stdout
