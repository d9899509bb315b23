"""The mutation catalog refuses what the tier could not judge: a mutation that no longer
applies, a name used twice, a mutation no test guards (``mutation.catalog``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mutation.catalog import Edit, Mutation, MutationError, apply, load, tracked_catalogs
from mutation.runner import judge

GOOD = """
[[mutation]]
name = "{name}"
guarantee = "the fence compares the token"
guards = {guards}
[[mutation.edit]]
file = "fence.sql"
old = "{old}"
new = ""
"""


def repository(tmp_path: Path, *catalogs: str) -> Path:
    """A git repository with ``fence.sql``, a test file and the mutation files given."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "fence.sql").write_text("WHERE id = $1 AND token = $2\n")
    (tmp_path / "test_fence.py").write_text("")
    for n, text in enumerate(catalogs):
        folder = tmp_path / "code" / ("sub" * n)
        folder.mkdir(exist_ok=True)
        if n:
            (folder / "fence.sql").write_text("WHERE id = $1 AND token = $2\n")
        (folder / "mutations.toml").write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    return tmp_path


def mutation(
    name: str = "token-compare", old: str = " AND token = $2", guards: str = '["test_fence.py"]'
) -> str:
    return GOOD.format(name=name, old=old, guards=guards)


def test_a_tracked_catalog_is_found_checked_and_applied(tmp_path: Path) -> None:
    root = repository(tmp_path, mutation())
    assert tracked_catalogs(root) == ["code/mutations.toml"]
    [found] = load(root)
    assert (found.name, found.guards, found.edits[0].file) == (
        "token-compare",
        ("test_fence.py",),
        "code/fence.sql",
    )
    apply(root, found)
    assert (root / "code" / "fence.sql").read_text() == "WHERE id = $1\n"


def test_a_mutation_whose_text_is_gone_no_longer_applies(tmp_path: Path) -> None:
    root = repository(tmp_path, mutation(old=" AND lease_token = $2"))
    with pytest.raises(
        MutationError, match=r"mutation token-compare no longer applies: code/fence\.sql holds 0"
    ):
        load(root)


def test_a_text_found_more_often_than_counted_no_longer_applies(tmp_path: Path) -> None:
    root = repository(tmp_path, mutation(old="$"))
    with pytest.raises(MutationError, match="holds 2 occurrence"):
        load(root)


def test_a_name_defined_twice_is_refused(tmp_path: Path) -> None:
    root = repository(tmp_path, mutation(), mutation())
    with pytest.raises(MutationError, match="'token-compare' is defined twice"):
        load(root)


@pytest.mark.parametrize(
    ("guards", "message"),
    [("[]", "guards is empty"), ('["test_gone.py::test_x"]', "no test file test_gone.py"), ('"x"', "a list")],
)
def test_guards_must_name_existing_tests(tmp_path: Path, guards: str, message: str) -> None:
    root = repository(tmp_path, mutation(guards=guards))
    with pytest.raises(MutationError, match=message):
        load(root)


def test_an_edit_outside_the_repository_is_refused(tmp_path: Path) -> None:
    root = repository(tmp_path, mutation().replace('file = "fence.sql"', 'file = "../../fence.sql"'))
    with pytest.raises(MutationError, match="outside the repository"):
        load(root)


@pytest.mark.parametrize(
    ("code", "failed", "errored", "verdict"),
    [
        (1, ["t.py::guard"], [], "caught"),
        (0, [], [], "survived"),
        (1, [], ["t.py::guard"], "error"),  # only errors: nothing judged the mutation
        (4, [], [], "error"),  # usage error, e.g. a guard that is not found
        (5, [], [], "error"),  # no tests collected
        (1, ["t.py::guard", "t.py::keep"], [], "error"),  # a test that must hold failed
    ],
)
def test_a_mutation_is_caught_only_by_a_failed_guard(
    code: int, failed: list[str], errored: list[str], verdict: str
) -> None:
    mutant = Mutation("m", "g", ("t.py::guard",), ("t.py::keep",), (Edit("f", "a", "b"),), "mutations.toml")
    assert judge(mutant, code, failed, errored, "", 1.0).verdict == verdict
