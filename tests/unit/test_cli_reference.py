"""docs/cli.md is the reference generated from the command tree, and up to date."""

from __future__ import annotations

from cli_support import REPO

from fairsched.cli.reference import reference


def test_cli_reference_is_up_to_date() -> None:
    committed = (REPO / "docs" / "cli.md").read_text("utf-8")
    assert reference() == committed, (
        "docs/cli.md is out of date: regenerate it with "
        "`.venv/bin/python -m fairsched.cli.reference > docs/cli.md`"
    )
