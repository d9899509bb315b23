"""serial: one job at a time per ``(queue, tenant, aggregate_key)``, in increasing sequence.

Only an aggregate's next job is ``pending``; the rest wait as ``waiting``,
outside every claim index, and are promoted when their predecessor finishes.
Gap mode ``strict`` waits for the missing number, ``lowest`` runs the lowest
present; poison mode ``block`` keeps a dead job at the head, ``skip`` passes it.
"""

from __future__ import annotations

from fairsched.policy import BasePolicy


class Serial(BasePolicy):
    """Per-aggregate order, enforced by the engine's aggregate state and head index."""

    name = "serial"
    serial = True
