"""The root ``fairsched`` app, its global options, and the helpers every command shares.

Errors are one line on stderr and exit status 1; usage errors exit 2; --debug shows
tracebacks. --config is accepted before the command as well as after it; the command's
own wins, then the one before it, then FAIRSCHED_CONFIG. --log-format and --log-level
(--debug: --log-level debug) are accepted anywhere before ``--`` and win over the
log_format / log_level settings (see :mod:`fairsched.logs`).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import psycopg
import typer
from rich.console import Console
from rich.table import Table

from fairsched import Client, __version__, bounds, load_settings, logs
from fairsched.db.connection import Role, connect, redact, translate
from fairsched.db.sql import QUERIES
from fairsched.errors import FairschedError, InvalidInput
from fairsched.settings import LogFormat, LogLevel, Settings


class _Group(typer.core.TyperGroup):
    """The root command group: turns every error into one line on stderr and exit 1, and
    takes the global flags after the command too (``fairsched status --debug``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if ctx.parent is None:
            args = _globals_first(args)
        return list(super().parse_args(ctx, args))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as e:
            if ctx.params.get("debug"):
                raise
            typer.echo(f"error: {_one_line(e)}", err=True)
            raise typer.Exit(1) from None


GLOBAL_FLAGS = ("--debug",)
"""Root flags accepted anywhere before ``--``."""
GLOBAL_OPTIONS = ("--log-format", "--log-level")
"""Root options (with their value) accepted anywhere before ``--``."""


def _globals_first(args: list[str]) -> list[str]:
    """The root's flags and options moved before the command, as the root parses them.

    >>> _globals_first(["worker", "--app", "a:b", "--log-format", "json", "--debug", "--", "x"])
    ['--log-format', 'json', '--debug', 'worker', '--app', 'a:b', '--', 'x']
    """
    end = args.index("--") if "--" in args else len(args)
    moved: list[str] = []
    rest: list[str] = []
    value_next = False
    for arg in args[:end]:
        if value_next or arg in GLOBAL_FLAGS or arg.partition("=")[0] in GLOBAL_OPTIONS:
            moved.append(arg)
            value_next = not value_next and arg in GLOBAL_OPTIONS
        else:
            rest.append(arg)
    return moved + rest + args[end:]


def _one_line(error: Exception) -> str:
    if isinstance(error, psycopg.Error):
        error = translate(error)
    if isinstance(error, FairschedError):
        text = str(error)
    else:
        text = f"unexpected {type(error).__name__}: {error} (rerun with --debug for the traceback)"
    return redact(" ".join(text.split()))


app = typer.Typer(
    cls=_Group,
    help="fairsched: a multi-tenant fair job scheduler on PostgreSQL.\n\n"
    "Exit status: 0 ok, 1 failure (one line on stderr; --debug for the traceback), 2 usage error.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fairsched {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    config: str | None = typer.Option(
        None,
        "--config",
        envvar="FAIRSCHED_CONFIG",
        help="TOML config file for the command (its own --config wins)",
    ),
    debug: bool = typer.Option(False, "--debug", help="show tracebacks and debug logs (--log-level debug)"),
    log_format: LogFormat | None = typer.Option(
        None,
        "--log-format",
        help="log lines as text or json, one object a line (default: the log_format setting)",
    ),
    log_level: LogLevel | None = typer.Option(
        None,
        "--log-level",
        case_sensitive=False,
        help="lowest level logged (default: the log_level setting)",
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """The global options; each command reads --config itself, through ConfigOption.

    Logs given here are set up at once; a command that runs a service (the worker) sets
    them up again from its settings, for what was not given here (:func:`setup_logs`).
    """
    ctx.call_on_close(logs.teardown)
    chosen_format, chosen_level = _log_choice(ctx)
    if chosen_format or chosen_level:
        logs.setup(chosen_format or "text", chosen_level or "info")


def _log_choice(ctx: typer.Context) -> tuple[LogFormat | None, LogLevel | None]:
    """The log format and level the command line gave (``--debug``: level debug)."""
    root = ctx.find_root()
    log_format: LogFormat | None = root.params.get("log_format")
    log_level: LogLevel | None = root.params.get("log_level")
    if log_level is None and root.params.get("debug"):
        log_level = "debug"
    return log_format, log_level


def setup_logs(ctx: typer.Context, settings: Settings) -> None:
    """Set up logs as the command line says, else as ``settings`` say (the worker's)."""
    log_format, log_level = _log_choice(ctx)
    logs.setup(log_format or settings.log_format, log_level or settings.log_level)


class _Parsed(Protocol):
    """What ConfigOption's callback reads of a parsed command: where a value came from."""

    def get_parameter_source(self, name: str) -> Enum | None: ...


def _given(ctx: _Parsed, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _config_choice(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """The command's --config if given there, else the root's if given before the command."""
    root = ctx.find_root()
    if root is ctx or param.name is None or _given(ctx, param.name) or not _given(root, "config"):
        return value
    chosen: str | None = root.params["config"]
    return chosen


ConfigOption = typer.Option(
    None, "--config", envvar="FAIRSCHED_CONFIG", callback=_config_choice, help="TOML config file"
)
JsonOption = typer.Option(False, "--json", help="print JSON instead of a table")
QueueArgument = typer.Argument(..., help="queue name")
TenantArgument = typer.Argument(..., help="tenant name")
LOOSE = {"ignore_unknown_options": True}
"""Lets a value such as -1 reach the command, which refuses it with a clear message."""


# -- clients and output ---------------------------------------------------------------


@contextmanager
def open_client(config: str | None, settings: Settings | None = None) -> Iterator[Client]:
    """A client for the configured database (the embedded server when none is set).

    One plain connection is tried first, so an unreachable server fails at once
    with the driver's reason instead of after the pool's timeout.
    """
    with Client.from_settings(settings or load_settings(config), role=Role.OPERATOR) as client:
        connect(client.dsn).close()
        yield client


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (datetimes as ISO 8601)."""
    typer.echo(json.dumps(data, indent=2, default=_json_default, ensure_ascii=False))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def console(*, stderr: bool = False) -> Console:
    """A rich console: the terminal's width, or wide when piped so lines stay greppable."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def print_table(table: Table) -> None:
    """Render a rich table on stdout."""
    console().print(table)


def database_now(conn: psycopg.Connection) -> datetime:
    """The database's clock, which every age and ``--since`` is measured against."""
    row = conn.execute(QUERIES["exporter_now"]).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


# -- parsing ------------------------------------------------------------------------------


def parse_payload(text: str) -> Any:
    """``--payload``: JSON text, ``@file`` or ``@-`` (stdin); the payload limits on depth
    and integer digits (:mod:`fairsched.bounds`) are checked while it is read."""
    from fairsched.engine.enqueue import payload_int_too_long, payload_too_deep

    source = "payload"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidInput(f"cannot read payload file {source}: {e}") from None

    def whole(digits: str) -> int:
        if len(digits.lstrip("-")) > bounds.PAYLOAD_MAX_INT_DIGITS:
            raise payload_int_too_long(source)
        return int(digits)

    try:
        return json.loads(text, parse_int=whole)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{source} is not valid JSON: {e}") from None
    except RecursionError:
        raise payload_too_deep(source) from None


def parse_when(text: str | None) -> datetime | None:
    """``--run-at``: an ISO 8601 timestamp with a time zone."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--run-at {text!r} is not an ISO 8601 timestamp") from None
    if when.tzinfo is None:
        raise InvalidInput(f"--run-at {text!r} has no time zone: add one, e.g. {text}+00:00")
    return when


def number_in(name: str, text: str, low: float, high: float) -> float:
    """A number in ``[low, high]`` (:mod:`fairsched.bounds`), or :class:`InvalidInput`
    naming ``name`` and the range."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"{name} {text[:40]!r} is not a number") from None
    if not low <= value <= high:
        raise InvalidInput(
            f"{name} must be a number in [{bounds.shown(low)}, {bounds.shown(high)}], got {text[:40]!r}"
        )
    return value


def whole_number(name: str, text: str, high: int = bounds.CAP_MAX) -> int:
    """A whole number in ``[1, high]``, or :class:`InvalidInput` naming ``name``."""
    stripped = text.strip()
    if not stripped.isdigit() or len(stripped) > 9 or not 1 <= int(stripped) <= high:
        raise InvalidInput(
            f"{name} must be a positive whole number or none (at most {high}), got {text[:40]!r}"
        )
    return int(stripped)


# -- help texts ----------------------------------------------------------------------------

_MARKUP = re.compile(r"``(.+?)``|:[a-z]+:`~?(.+?)`")


def plain(text: str) -> str:
    """Help text without reST markup: literals and roles read as their bare text.

    >>> plain("Set (``none``) a cap; see :class:`~fairsched.Client` and :func:`serve`.")
    'Set (none) a cap; see fairsched.Client and serve.'
    """
    return _MARKUP.sub(lambda m: m.group(1) or m.group(2), text)


def plain_help(typer_app: typer.Typer) -> None:
    """Strip reST markup from the help of every command and group of ``typer_app``, in place.

    Command help comes from docstrings, which are written for code readers too.
    """
    for command in typer_app.registered_commands:
        text = command.help or inspect.getdoc(command.callback)
        if text:
            command.help = plain(text)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            info = group.typer_instance.info
            if isinstance(info.help, str):
                info.help = plain(info.help)
            plain_help(group.typer_instance)
