"""The policy plug-in interface, as a separately installed policy package uses it.

>>> from fairsched.policy import BasePolicy, OrderTerm
>>> class Newest(BasePolicy):
...     name = "newest"
...     def job_order(self):
...         return [OrderTerm("id", descending=True)]
>>> Newest().job_order()
[OrderTerm(column='id', descending=True)]
"""

from fairsched.policy.interface import (
    GROUP,
    Admission,
    BasePolicy,
    ClaimHead,
    EnqueueColumn,
    JobState,
    OrderTerm,
    Pending,
    Policy,
    TenantOrder,
)
from fairsched.policy.settings import Setting, SettingLevel, Throttle

__all__ = [
    "GROUP",
    "Admission",
    "BasePolicy",
    "ClaimHead",
    "EnqueueColumn",
    "JobState",
    "OrderTerm",
    "Pending",
    "Policy",
    "Setting",
    "SettingLevel",
    "TenantOrder",
    "Throttle",
]
