"""The built-in fairness policies, registered through the ``fairsched.policies`` entry points."""
