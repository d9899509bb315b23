"""The ``fairsched`` command line: one module per command group, renderers apart; the
command table and the console script's entry point are in :mod:`fairsched.cli.main`."""
