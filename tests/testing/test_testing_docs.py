"""docs/testing.md shows the example of ``tests/examples/`` as it is: each code block
under a file's name is that file, and every example file is shown."""

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


def test_the_page_shows_every_example_file_verbatim() -> None:
    shown = shown_files((ROOT / "docs" / "testing.md").read_text(encoding="utf-8"))
    examples = {f"tests/examples/{p.name}" for p in EXAMPLES.glob("*.py") if p.name != "conftest.py"}
    assert set(shown) == examples
    for path, code in shown.items():
        assert code == (ROOT / path).read_text(encoding="utf-8"), f"docs/testing.md shows an old {path}"
