"""The lab's named queries, from the ``.sql`` files of this folder (as the product's are
from ``fairsched/db/sql``: ``-- name: <name>`` then a one-line purpose).

Lab queries read the product's documented tables (``fairsched.jobs``, the
``fairsched.attempts`` view, ``fairsched.job_events``) and write only to objects of the
lab's own schema, :data:`LAB_SCHEMA`; none of them creates anything in ``fairsched``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import LiteralString, cast

LAB_SCHEMA = "fairsched_lab"
"""The schema the lab creates its tables in: the ledger, the commit probe's row, the
plain loop's seed table."""

_NAMED = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load(folder: Path) -> dict[str, LiteralString]:
    """Every named query of ``folder``'s ``.sql`` files; a name defined twice is an error."""
    found: dict[str, LiteralString] = {}
    for path in sorted(folder.glob("*.sql")):
        chunks = _NAMED.split(path.read_text("utf-8"))
        for name, text in zip(chunks[1::2], chunks[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"lab query {name!r} is defined twice ({path.name})")
            found[name] = cast(LiteralString, text.strip())
    return found


QUERIES = load(Path(__file__).parent)
