"""The testing helpers' static queries, loaded once from ``testing.sql`` (named as in
:mod:`fairsched.db.sql`: ``-- name: <name>``, then a one-line ``-- <purpose>``)."""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, LiteralString]:
    text = resources.files(__package__).joinpath("testing.sql").read_text("utf-8")
    parts = _HEADER.split(text)[1:]
    return {
        name: cast(LiteralString, body.strip()) for name, body in zip(parts[::2], parts[1::2], strict=True)
    }


QUERIES = _load()
