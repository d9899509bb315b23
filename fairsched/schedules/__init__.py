"""Periodic jobs: cron expressions in a time zone (:mod:`.cron`), the schedules a config
file declares (:mod:`.spec`), and the duty that enqueues their ticks exactly once
(:mod:`.ticks`)."""
