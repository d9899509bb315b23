"""The worker runtime: handlers (:class:`App`), the process, queue runners, heartbeats,
the finisher, and the background services every worker runs."""
