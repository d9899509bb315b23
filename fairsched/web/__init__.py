"""``fairsched web``: the dashboard, a face over the client and :mod:`fairsched.observe`.

Only :mod:`fairsched.web.settings` is imported by the rest of fairsched (the settings'
``web`` section); everything else needs the ``web`` extra (Starlette, Jinja2, uvicorn).
"""
