"""The command-line reference in Markdown, generated from the command tree so it cannot drift.

Regenerate docs/cli.md after changing a command, an option or a help text::

    python -m fairsched.cli.reference > docs/cli.md
"""

from __future__ import annotations

from typing import Any

import typer

from fairsched.cli.main import app

HEADER = """\
# Command-line reference

Generated from the command tree by `python -m fairsched.cli.reference > docs/cli.md`:
do not edit by hand. Every command takes `--help`. `--config` is accepted before the
command as well as after it (the command's own wins, then the one before it, then
`FAIRSCHED_CONFIG`).
"""


def reference() -> str:
    """Every command of the app, depth first in --help order: usage, help, arguments, options."""
    root = typer.main.get_command(app)
    sections = [HEADER]
    _walk(root, typer.Context(root, info_name="fairsched"), sections)
    return "\n".join(sections)


def _walk(command: Any, ctx: typer.Context, sections: list[str]) -> None:
    sections.append(_section(command, ctx))
    for name in getattr(command, "list_commands", lambda _ctx: [])(ctx):
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            _walk(sub, typer.Context(sub, info_name=name, parent=ctx), sections)


def _section(command: Any, ctx: typer.Context) -> str:
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    lines = [f"## {ctx.command_path}", "", "```", usage, "```", ""]
    if command.help:
        lines += [command.help.strip(), ""]
    records = [(p.param_type_name, p.get_help_record(ctx)) for p in command.params]
    for kind in ("argument", "option"):
        rows = [record for param_kind, record in records if param_kind == kind and record is not None]
        if rows:
            lines += [f"| {kind} | description |", "|---|---|"]
            lines += [f"| `{_cell(name)}` | {_cell(text)} |" for name, text in rows]
            lines.append("")
    commands: list[str] = getattr(command, "list_commands", lambda _ctx: [])(ctx)
    if commands:
        lines += ["Commands: " + ", ".join(f"`{name}`" for name in commands) + ".", ""]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text that stays in one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


if __name__ == "__main__":
    typer.echo(reference(), nl=False)
