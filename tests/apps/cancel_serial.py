"""A serial queue whose handler works until cancelled (see apps.cancel)."""

from __future__ import annotations

from apps.cancel import run_sync
from fairsched.worker.app import App

app = App()
app.handler("cancel_serial")(run_sync)
