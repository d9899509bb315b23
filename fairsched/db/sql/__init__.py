"""Named static queries, loaded once from the ``.sql`` files of this folder.

Each query starts with ``-- name: <name>`` followed by a one-line ``-- <purpose>``
comment. Queries take psycopg named parameters. Names are unique across files.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, LiteralString]:
    queries: dict[str, LiteralString] = {}
    for file in sorted(resources.files(__package__).iterdir(), key=lambda f: f.name):
        if not file.name.endswith(".sql"):
            continue
        parts = _HEADER.split(file.read_text("utf-8"))[1:]
        for name, body in zip(parts[::2], parts[1::2], strict=True):
            if name in queries:
                raise RuntimeError(f"query {name!r} is defined twice ({file.name})")
            queries[name] = cast(LiteralString, body.strip())
    return queries


QUERIES = _load()
