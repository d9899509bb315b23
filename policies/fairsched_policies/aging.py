"""aging: priority that rises with waiting.

Each job carries ``aging_key = enqueued_at - priority * aging_interval`` (epoch
seconds, fixed at enqueue) and claims take the smallest key first. The bound
follows: a job A of priority p enqueued at t_A is overtaken by a job B of
priority q > p enqueued at t_B only when key_B < key_A, that is when
t_B - t_A < (q - p) * aging_interval. So B never overtakes A when it was
enqueued more than ``(q - p) * aging_interval`` after A.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairsched.policy import BasePolicy, OrderTerm


class Aging(BasePolicy):
    """``aging_key, id``: priority worth ``aging_interval_seconds`` of waiting per level."""

    name = "aging"

    def job_order(self) -> Sequence[OrderTerm]:
        return (OrderTerm("aging_key"), OrderTerm("id"))
