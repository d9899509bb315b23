"""The docs show the examples of ``tests/examples/`` as they are: docs/testing.md each of
its files whole (a code block under a file's name is that file), docs/async.md excerpts
of the framework examples (each block under a link to a file is found in that file), and
every example file is on one of the two pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "examples"
SHOWN = re.compile(r"^`(tests/examples/[\w/]+\.py)`:\n\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def shown_files(text: str) -> dict[str, str]:
    """The files a page shows: ``{path: code}``.

    >>> shown_files("`tests/examples/a.py`:\\n\\n```python\\nx = 1\\n```\\n")
    {'tests/examples/a.py': 'x = 1\\n'}
    """
    return {path: code for path, code in SHOWN.findall(text)}


def quoted_excerpts(text: str) -> list[tuple[str, str]]:
    """Each Python block of a page after its last link to an example file: ``(path, code)``.

    >>> quoted_excerpts("[tests/examples/a.py](x)\\n\\n```python\\nx = 1\\n```\\n")
    [('tests/examples/a.py', 'x = 1\\n')]
    """
    excerpts = []
    for block in re.finditer(r"^```python\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
        links = re.findall(r"\[(tests/examples/\w+\.py)\]", text[: block.start()])
        if links:
            excerpts.append((links[-1], block.group(1)))
    return excerpts


def test_the_async_page_quotes_its_examples_as_they_are() -> None:
    excerpts = quoted_excerpts(ASYNC_PAGE.read_text(encoding="utf-8"))
    assert {path for path, _ in excerpts} == ASYNC_EXAMPLES
    for path, code in excerpts:
        assert code in (ROOT / path).read_text(encoding="utf-8"), f"docs/async.md quotes an old {path}"


ASYNC_PAGE = ROOT / "docs" / "async.md"
ASYNC_EXAMPLES = {
    f"tests/examples/{name}.py" for name in ("fastapi_app", "django_orders", "sqlalchemy_orders")
}
"""The framework examples docs/async.md quotes; they and their tests are not testing.md's."""


def test_the_page_shows_every_example_file_verbatim() -> None:
    shown = shown_files((ROOT / "docs" / "testing.md").read_text(encoding="utf-8"))
    async_files = ASYNC_EXAMPLES | {path.replace("/examples/", "/examples/test_") for path in ASYNC_EXAMPLES}
    examples = {f"tests/examples/{p.name}" for p in EXAMPLES.glob("*.py") if p.name != "conftest.py"}
    assert set(shown) == examples - async_files
    for path, code in shown.items():
        assert code == (ROOT / path).read_text(encoding="utf-8"), f"docs/testing.md shows an old {path}"
