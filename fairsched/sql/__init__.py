"""Named static queries, loaded once from ``queries.sql``.

Each query in the file starts with ``-- name: <name>`` followed by a one-line
``-- <purpose>`` comment. Queries take psycopg named parameters.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, LiteralString]:
    text = resources.files(__package__).joinpath("queries.sql").read_text("utf-8")
    parts = _HEADER.split(text)[1:]
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[::2], parts[1::2], strict=True):
        if name in queries:
            raise RuntimeError(f"query {name!r} defined twice in queries.sql")
        queries[name] = cast(LiteralString, body.strip())
    return queries


QUERIES = _load()
