"""The policy plug-in interface, as a separately installed policy package uses it.

>>> from fairsched.policy import BasePolicy, OrderTerm
>>> class Newest(BasePolicy):
...     name = "newest"
...     def job_order(self):
...         return [OrderTerm("id", descending=True)]
>>> Newest().job_order()
[OrderTerm(column='id', descending=True)]
"""

from fairsched.policy.interface import GROUP, BasePolicy, OrderColumn, OrderTerm, Policy

__all__ = ["GROUP", "BasePolicy", "OrderColumn", "OrderTerm", "Policy"]
