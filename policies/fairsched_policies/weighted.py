"""weighted: tenant fair share by stride scheduling on live weights.

Each tenant of a queue has a virtual time ``pass``; a claim takes the tenants
with the lowest pass first and advances each by ``cost / weight`` per job
(cost 1, or the tenant's measured run time with ``charge = "runtime"``). A
tenant that becomes active again starts at the queue's lowest active pass (or,
when no tenant is active, the highest pass reached), so idling banks no credit.
Weights are read at claim time: a change applies to the next claim and to the
whole queued backlog.
"""

from __future__ import annotations

from fairsched.policy import BasePolicy


class Weighted(BasePolicy):
    """Tenants first, by virtual time; jobs within a tenant by the stack's job order."""

    name = "weighted"
    orders_tenants = True
