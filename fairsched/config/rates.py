"""Rates: the setting called ``rate`` (most jobs claimed per period, e.g. ``"50/s"``)
under the names fairsched has always given it: ``fairsched tenant rate``,
``Client.set_tenant_rate`` and ``Client.set_queue_rate``. They take the generic path
of every policy's settings (:mod:`fairsched.config.policysettings`); the policy that
declares ``rate`` parses, stores and refuses its values."""

from __future__ import annotations

RATE = "rate"
"""The setting's name, in the configuration file and on the command line."""
