"""The ``fairsched`` command line: one module per command group, renderers apart."""
