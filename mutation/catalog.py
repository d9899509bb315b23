"""The mutations of a checkout: every git-tracked ``mutations.toml``, read and checked.

A file holds ``[[mutation]]`` tables::

    [[mutation]]
    name = "complete-token-compare"          # unique across the repository
    guarantee = "a completion presents the lease's current token"
    guards = ["tests/db/test_fence.py::test_same_owner_old_token_cannot_complete"]
    keeps = []                               # optional: tests that must still pass
    [[mutation.edit]]
    file = "014_stack_enqueue_complete.sql"  # relative to this file's folder
    old = "AND j.lease_token = p_tokens[array_position(p_ids, j.id)]"
    new = ""
    count = 1                                # optional: how often ``old`` occurs

An edit whose ``old`` text does not occur exactly ``count`` times in its file no longer
applies: that is an error (the code moved or changed; move or rewrite the mutation), never
a pass.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CATALOG_NAME = "mutations.toml"
"""The name of every mutation file."""

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_MUTATION_KEYS = frozenset({"name", "guarantee", "guards", "keeps", "edit"})
_EDIT_KEYS = frozenset({"file", "old", "new", "count"})


class MutationError(Exception):
    """A mutation file that cannot be used as it is: one message says which and why."""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (occurring ``count`` times) by ``new`` in ``file`` (repository-relative)."""

    file: str
    old: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class Mutation:
    """A guarantee broken on purpose, the tests that must fail, the tests that must not."""

    name: str
    guarantee: str
    guards: tuple[str, ...]
    keeps: tuple[str, ...]
    edits: tuple[Edit, ...]
    source: str
    """The mutation file it comes from (repository-relative)."""


def tracked_catalogs(root: Path) -> list[str]:
    """The repository-relative paths of the tracked mutation files under ``root``."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", CATALOG_NAME, f"*/{CATALOG_NAME}"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout
    return sorted(p for p in out.decode().split("\0") if p)


def load(root: Path, catalogs: list[str] | None = None) -> list[Mutation]:
    """Every mutation of the tracked mutation files (or of ``catalogs``), checked: names
    unique, guards given and present, each edit applying to the files as they are."""
    mutations: list[Mutation] = []
    for catalog in tracked_catalogs(root) if catalogs is None else catalogs:
        path = root / catalog
        try:
            document = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise MutationError(f"{catalog}: cannot be read: {error}") from error
        unknown = set(document) - {"mutation"}
        if unknown:
            raise MutationError(f"{catalog}: unknown table or key {sorted(unknown)}; only [[mutation]]")
        for table in _list(document.get("mutation", []), f"{catalog}: mutation"):
            mutations.append(_mutation(root, catalog, table))
    seen: dict[str, str] = {}
    for m in mutations:
        if m.name in seen:
            raise MutationError(f"mutation {m.name!r} is defined twice: in {seen[m.name]} and {m.source}")
        seen[m.name] = m.source
    for m in mutations:
        apply(root, m, write=False)
    return mutations


def apply(root: Path, mutation: Mutation, *, write: bool = True) -> None:
    """Apply ``mutation``'s edits to the files under ``root`` (only check they apply when
    not ``write``); raises :class:`MutationError` when one no longer applies."""
    texts: dict[str, str] = {}
    for edit in mutation.edits:
        if edit.file not in texts:
            try:
                texts[edit.file] = (root / edit.file).read_text()
            except OSError as error:
                raise MutationError(f"mutation {mutation.name} no longer applies: {error}") from error
        found = texts[edit.file].count(edit.old)
        if found != edit.count:
            raise MutationError(
                f"mutation {mutation.name} no longer applies: {edit.file} holds {found} "
                f"occurrence(s) of the text to replace, not {edit.count}: {_excerpt(edit.old)}"
            )
        texts[edit.file] = texts[edit.file].replace(edit.old, edit.new)
    if write:
        for file, text in texts.items():
            (root / file).write_text(text)


def _mutation(root: Path, catalog: str, table: Any) -> Mutation:
    if not isinstance(table, dict):
        raise MutationError(f"{catalog}: a [[mutation]] is not a table")
    where = f"{catalog}: mutation {table.get('name', '?')!r}"
    unknown = set(table) - _MUTATION_KEYS
    if unknown:
        raise MutationError(f"{where}: unknown key(s) {sorted(unknown)}")
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise MutationError(f"{where}: name must be lowercase words joined by '-', got {name!r}")
    guarantee = table.get("guarantee")
    if not isinstance(guarantee, str) or not guarantee.strip():
        raise MutationError(f"{where}: guarantee must say what the mutation breaks")
    guards = _tests(root, where, "guards", table.get("guards"))
    if not guards:
        raise MutationError(f"{where}: guards is empty: name the tests that must fail")
    keeps = _tests(root, where, "keeps", table.get("keeps", []))
    edits = tuple(_edit(root, catalog, where, e) for e in _list(table.get("edit"), f"{where}: edit"))
    if not edits:
        raise MutationError(f"{where}: no [[mutation.edit]]")
    return Mutation(name, guarantee.strip(), guards, keeps, edits, catalog)


def _tests(root: Path, where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
        raise MutationError(f"{where}: {key} must be a list of pytest node ids")
    for test in value:
        if not (root / test.split("::")[0]).is_file():
            raise MutationError(f"{where}: {key}: no test file {test.split('::')[0]}")
    return tuple(value)


def _edit(root: Path, catalog: str, where: str, table: Any) -> Edit:
    if not isinstance(table, dict) or set(table) - _EDIT_KEYS:
        raise MutationError(f"{where}: an edit is a table of {sorted(_EDIT_KEYS)}")
    file, old, new, count = table.get("file"), table.get("old"), table.get("new"), table.get("count", 1)
    if not isinstance(file, str) or not isinstance(old, str) or not old or not isinstance(new, str):
        raise MutationError(f"{where}: an edit needs file, a non-empty old and new (text)")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise MutationError(f"{where}: count must be a positive integer, got {count!r}")
    resolved = (root / Path(catalog).parent / file).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise MutationError(f"{where}: edit file {file} is outside the repository")
    return Edit(str(resolved.relative_to(root.resolve())), old, new, count)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise MutationError(f"{where}: expected an array of tables")
    return value


def _excerpt(text: str) -> str:
    line = " ".join(text.split())
    return repr(line if len(line) <= 80 else line[:77] + "...")
