"""The user documentation names only files that are in the repository.

Scans README.md and docs/*.md for relative Markdown links and for repository paths
(``deploy/...``, ``config/...``, ``fairsched/...``, ``docs/...``, ``bench/...`` and the
other top-level folders), in prose, inline code and code blocks alike, and checks
that each one exists. A path may end in ``::test_name`` (a pytest node id) or hold a
``*`` (a glob that must match something).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

TOP_LEVEL = ("bench", "config", "deploy", "docs", "fairsched", "migrations", "policies", "tests", r"\.ci")
REPO_PATH = re.compile(
    # Not inside a longer path or URL (``~/.local/share/fairsched/pgdata``,
    # ``https://example.com/docs/x``), nor part of a word or an identifier.
    r"(?<![\w./~$@:-])"
    rf"((?:{'|'.join(TOP_LEVEL)})/[\w./*@-]*)"
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SETUP = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[binary,embedded]' && .venv/bin/fairsched demo",
    "bash .ci/run",
)


def repo_paths(text: str) -> set[str]:
    """Every repository path the text names, without trailing punctuation or node ids.

    >>> sorted(repo_paths("see `deploy/check.sh`, docs/capacity.md. and ~/.local/share/fairsched/pgdata"))
    ['deploy/check.sh', 'docs/capacity.md']
    >>> sorted(repo_paths("tests/db/test_roles.py::test_x and https://example.com/docs/page"))
    ['tests/db/test_roles.py']
    """
    found = set()
    for match in REPO_PATH.finditer(text):
        path = match.group(1).split("::")[0].rstrip(".-")
        found.add(path)
    return found


def relative_links(text: str) -> set[str]:
    """Targets of Markdown links that point into the repository (no scheme, no bare anchor).

    >>> sorted(relative_links("[a](cli.md) [b](https://x.org/y) [c](#top) [d](../config/f.toml#k)"))
    ['../config/f.toml', 'cli.md']
    """
    targets = set()
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.add(target.split("#")[0])
    return targets


def exists(path: Path) -> bool:
    """The file or folder exists; a pattern with ``*`` matches at least one."""
    return bool(glob.glob(str(path))) if "*" in str(path) else path.exists()


def test_the_documents_are_there() -> None:
    assert (ROOT / "README.md").is_file()
    assert len(DOCS) > 1


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_in_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = sorted(t for t in relative_links(text) if t and not exists(doc.parent / t))
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_repository_paths_named_exist(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = sorted(p for p in repo_paths(text) if not exists(ROOT / p))
    assert not missing, f"{doc.relative_to(ROOT)} names missing files: {missing}"


def test_the_readme_gives_the_two_setup_commands_verbatim() -> None:
    lines = {line.strip() for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()}
    for command in SETUP:
        assert command in lines, f"README.md lacks the line {command!r}"
