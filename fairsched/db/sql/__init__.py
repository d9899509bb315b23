"""Named static queries, loaded once from the ``.sql`` files of this folder.

Each query starts with ``-- name: <name>`` followed by a one-line ``-- <purpose>``
comment. Queries take psycopg named parameters. Names are unique across files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from importlib.resources.abc import Traversable
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load(files: Iterable[Traversable]) -> dict[str, LiteralString]:
    """The named statements of ``.sql`` files (``-- name: <name>`` headers, names unique
    across them): this folder's, or a policy's own."""
    queries: dict[str, LiteralString] = {}
    for file in sorted(files, key=lambda f: f.name):
        if not file.name.endswith(".sql"):
            continue
        parts = _HEADER.split(file.read_text("utf-8"))[1:]
        for name, body in zip(parts[::2], parts[1::2], strict=True):
            if name in queries:
                raise RuntimeError(f"query {name!r} is defined twice ({file.name})")
            queries[name] = cast(LiteralString, body.strip())
    return queries


QUERIES = load(resources.files(__package__).iterdir())
