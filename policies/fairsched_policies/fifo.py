"""fifo: the reference order, highest priority first, then oldest available, then id."""

from __future__ import annotations

from collections.abc import Sequence

from fairsched.policy import BasePolicy, OrderTerm


class Fifo(BasePolicy):
    """``priority DESC, available_at, id``."""

    name = "fifo"

    def job_order(self) -> Sequence[OrderTerm]:
        return (OrderTerm("priority", descending=True), OrderTerm("available_at"), OrderTerm("id"))
