"""Changes, each in two steps: a POST without ``confirmed`` shows what will change (nothing
changes), the same POST with ``confirmed=1`` makes the change through the client. Both
steps need an authenticated user, ``web.actions`` on and the CSRF field
(:func:`fairsched.web.auth.check_change`). Dead-job, aggregate and cancel changes are
recorded in the job's history with ``by = "web:<user>"``; weight and cap changes in
``fairsched.admin_events``, and logged by ``fairsched.web.audit`` with the user.

Each action is one :class:`Action` in :data:`ACTIONS`, served at ``/actions/<name>``: a
new one is one more entry with its own parse, preview and perform.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fairsched import Client, bounds
from fairsched.config.live import tenant_set
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine import dead, enqueue
from fairsched.errors import InvalidInput
from fairsched.observe.status import tenant_share
from fairsched.policy import registry as policy
from fairsched.policy.owned import caps_refused
from fairsched.web import auth
from fairsched.web.app import Web
from fairsched.web.formats import number
from fairsched.web.forms import form_fields, job_id

audit = logging.getLogger("fairsched.web.audit")

Params = dict[str, Any]
Change = tuple[str, str, str]
"""What changes: (what, now, after)."""


@dataclass(frozen=True)
class Action:
    """One kind of change: its form's fields read and checked, what it would change, and
    the change itself (returning the line shown when it is done)."""

    title: str
    parse: Callable[[dict[str, str]], Params]
    preview: Callable[[psycopg.Connection, Params], list[Change]]
    perform: Callable[[Client, Params, str], str]


# -- tenant weight and cap ---------------------------------------------------------


def _tenant_parse(fields: dict[str, str]) -> Params:
    queue = enqueue.check_queue_name(fields.get("queue", ""))
    tenant = enqueue.check_label("tenant", fields.get("tenant", ""), enqueue.MAX_TENANT_CHARS)
    weight_text, cap_text = fields.get("weight", "").strip(), fields.get("cap", "").strip().lower()
    weight = cap = None
    if weight_text:
        try:
            weight = bounds.number_checked(
                "weight", float(weight_text[:40]), bounds.WEIGHT_MIN, bounds.WEIGHT_MAX
            )
        except ValueError:
            raise InvalidInput(f"weight {weight_text[:40]!r} is not a number") from None
    if cap_text:
        if cap_text == "none":
            cap = 0
        elif cap_text.isdigit() and len(cap_text) <= 9 and 1 <= int(cap_text) <= bounds.CAP_MAX:
            cap = int(cap_text)
        else:
            raise InvalidInput(
                f"cap must be a whole number from 1 to {bounds.CAP_MAX} or none, got {cap_text[:40]!r}"
            )
    if weight is None and cap is None:
        raise InvalidInput("give a weight, a cap, or both")
    return {"queue": queue, "tenant": tenant, "weight": weight, "cap": cap}


def _tenant_preview(conn: psycopg.Connection, p: Params) -> list[Change]:
    stack = policy.queue_stack(conn, p["queue"])  # UnknownQueue when it is not declared
    if p["cap"] and not stack.enforces_caps:
        raise caps_refused(p["queue"], stack.names)
    share = tenant_share(conn, p["queue"], p["tenant"]) or {}
    changes = []
    if p["weight"] is not None:
        changes.append(("weight", number(share.get("weight", 1.0)), number(p["weight"])))
    if p["cap"] is not None:
        changes.append(("cap", str(share.get("cap") or "none"), str(p["cap"] or "none")))
    return changes


def _tenant_perform(client: Client, p: Params, by: str) -> str:
    with client.connection() as conn:
        note = tenant_set(conn, p["queue"], p["tenant"], weight=p["weight"], cap=p["cap"], by=by)
    audit.info(
        "tenant %s/%s changed by %s: weight %s, cap %s",
        p["queue"],
        p["tenant"],
        by,
        "unchanged" if p["weight"] is None else number(p["weight"]),
        "unchanged" if p["cap"] is None else p["cap"] or "none",
        extra={"by": by, "queue": p["queue"], "tenant": p["tenant"], "weight": p["weight"], "cap": p["cap"]},
    )
    return f"{p['queue']}/{p['tenant']} changed{note}"


# -- dead jobs ------------------------------------------------------------------------


def _dead_parse(fields: dict[str, str]) -> Params:
    what = fields.get("do", "")
    if what not in ("replay", "discard"):
        raise InvalidInput("do must be replay or discard")
    return {"job": job_id(fields.get("job", "")), "do": what}


def _dead_preview(conn: psycopg.Connection, p: Params) -> list[Change]:
    job = dead.job_show(conn, p["job"])
    if job["status"] != "dead":
        raise InvalidInput(f"job {p['job']} is {job['status']}, not dead: nothing to {p['do']}")
    after = "pending (same id, fresh attempts, history kept)" if p["do"] == "replay" else "discarded"
    return [(f"job {p['job']} ({job['queue_name']}/{job['tenant']})", "dead", after)]


def _dead_perform(client: Client, p: Params, by: str) -> str:
    if p["do"] == "replay":
        client.dead_replay(p["job"], by=by)
        return f"job {p['job']} replayed: pending again"
    client.dead_discard(p["job"], by=by)
    return f"job {p['job']} discarded"


# -- cancel a job ---------------------------------------------------------------------

_UNFINISHED = {"pending": "cancelled", "waiting": "cancelled", "running": "asked to stop; then cancelled"}


def _cancel_parse(fields: dict[str, str]) -> Params:
    return {"job": job_id(fields.get("job", ""))}


def _cancel_preview(conn: psycopg.Connection, p: Params) -> list[Change]:
    job = dead.job_show(conn, p["job"])
    if job["status"] not in _UNFINISHED:
        raise InvalidInput(f"job {p['job']} already finished ({job['status']}): nothing to cancel")
    return [
        (f"job {p['job']} ({job['queue_name']}/{job['tenant']})", job["status"], _UNFINISHED[job["status"]])
    ]


def _cancel_perform(client: Client, p: Params, by: str) -> str:
    outcome = client.cancel(p["job"], by=by)
    if outcome == "requested":
        return f"job {p['job']} asked to stop: it ends cancelled unless it succeeds first"
    return f"job {p['job']} cancelled"


# -- blocked aggregates ---------------------------------------------------------------


def _aggregate_parse(fields: dict[str, str]) -> Params:
    what = fields.get("do", "")
    if what not in ("unblock", "skip"):
        raise InvalidInput("do must be unblock or skip")
    return {
        "queue": enqueue.check_queue_name(fields.get("queue", "")),
        "tenant": enqueue.check_label("tenant", fields.get("tenant", ""), enqueue.MAX_TENANT_CHARS),
        "key": enqueue.check_label("aggregate key", fields.get("key", ""), enqueue.MAX_KEY_CHARS),
        "do": what,
    }


def _aggregate_preview(conn: psycopg.Connection, p: Params) -> list[Change]:
    with operation("web_aggregate_blocked"):
        row = conn.execute(QUERIES["web_aggregate_blocked"], p).fetchone()
    if row is None:
        raise InvalidInput(f"aggregate {p['key'][:80]!r} of {p['queue']}/{p['tenant'][:80]} is not blocked")
    head = row[0]
    if p["do"] == "unblock":
        return [(f"dead head job {head}", "dead", "pending again; the aggregate follows it")]
    return [(f"dead head job {head}", "dead", "discarded; the next job of the aggregate may run")]


def _aggregate_perform(client: Client, p: Params, by: str) -> str:
    if p["do"] == "unblock":
        job = client.aggregate_unblock(p["queue"], p["tenant"], p["key"], by=by)
        return f"aggregate {p['key']} unblocked: job {job} pending again"
    job = client.aggregate_skip(p["queue"], p["tenant"], p["key"], by=by)
    return f"aggregate {p['key']}: job {job} discarded, the next one may run"


ACTIONS: dict[str, Action] = {
    "tenant": Action("Change a tenant's weight or cap", _tenant_parse, _tenant_preview, _tenant_perform),
    "dead": Action("Replay or discard a dead job", _dead_parse, _dead_preview, _dead_perform),
    "cancel": Action("Cancel a job", _cancel_parse, _cancel_preview, _cancel_perform),
    "aggregate": Action(
        "Unblock or skip a blocked aggregate", _aggregate_parse, _aggregate_preview, _aggregate_perform
    ),
}


def routes(web: Web) -> list[Route]:
    return [
        Route("/actions/tenant", _tenant_form(web), methods=["GET"]),
        Route("/actions/{name}", _action(web), methods=["POST"]),
    ]


def _tenant_form(web: Web) -> Callable[[Request], Any]:
    async def form(request: Request) -> Response:
        if not web.web.actions:
            raise auth.Forbidden("actions are off: set web.actions = true (docs/web.md)")
        queue = enqueue.check_queue_name(request.query_params.get("queue", ""))
        tenant = enqueue.check_label(
            "tenant", request.query_params.get("tenant", ""), enqueue.MAX_TENANT_CHARS
        )
        share = await web.read(tenant_share, queue, tenant) or {}
        return web.render(request, "tenant_form.html", queue=queue, tenant=tenant, share=share)

    return form


def _action(web: Web) -> Callable[[Request], Any]:
    async def act(request: Request) -> Response:
        name = request.path_params["name"]
        action = ACTIONS.get(name)
        if action is None:
            raise InvalidInput(f"no action {name[:40]!r}")
        fields = await form_fields(request)
        auth.check_change(request, web.web, fields.get(auth.CSRF_FIELD, ""))
        user: auth.User = request.scope["fairsched.user"]
        params = action.parse(fields)
        changes = await web.read(action.preview, params)
        if fields.get("confirmed") != "1":
            hidden = {k: v for k, v in fields.items() if k not in (auth.CSRF_FIELD, "confirmed")}
            return web.render(
                request, "confirm.html", action=action, name=name, changes=changes, hidden=hidden, by=user.by
            )
        done = await web.call(action.perform, web.client, params, user.by)
        return web.render(request, "done.html", action=action, message=done, changes=changes, by=user.by)

    return act
