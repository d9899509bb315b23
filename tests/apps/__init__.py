"""Handler modules that test worker processes run (``--app apps.probe:app``)."""
