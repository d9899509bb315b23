"""The read-only pages: overview, queue (with its share chart's samples), starvation,
aggregates, dead jobs, one job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fairsched.engine import enqueue
from fairsched.errors import InvalidInput
from fairsched.observe.status import BLOCKED_SHOWN, parse_since, read_status
from fairsched.web import reads
from fairsched.web.app import Web
from fairsched.web.forms import job_id, optional, page_number

DEAD_LIMITS = (50, 200, 1000)
"""Dead jobs a page may list, newest first."""


def routes(web: Web) -> list[Route]:
    def page(fn: Callable[[Web, Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return cast(Response, await fn(web, request))

        return endpoint

    return [
        Route("/", page(overview)),
        Route("/queues/{name}", page(queue)),
        Route("/queues/{name}/shares.json", page(shares)),
        Route("/starvation", page(starvation)),
        Route("/aggregates", page(aggregates)),
        Route("/dead", page(dead_jobs)),
        Route("/jobs/{id}", page(job)),
    ]


async def overview(web: Web, request: Request) -> Response:
    found = await web.read(reads.overview, web.settings, web.limits)
    return web.render(request, "overview.html", overview=found, status=found.status)


async def queue(web: Web, request: Request) -> Response:
    name = enqueue.check_queue_name(request.path_params["name"])
    params = request.query_params
    sort = params.get("sort", "oldest")
    if sort not in reads.SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(reads.SORTS)}, got {sort[:40]!r}")
    descending = params.get("dir", "desc") != "asc"
    found = await web.read(
        reads.queue_page, name, web.limits, sort=sort, descending=descending, page=page_number(params)
    )
    return web.render(request, "queue.html", q=found)


async def shares(web: Web, request: Request) -> Response:
    name = enqueue.check_queue_name(request.path_params["name"])
    tenants = request.query_params.getlist("tenant")
    if len(tenants) > reads.CHART_TENANTS:
        raise InvalidInput(f"at most {reads.CHART_TENANTS} tenants per chart")
    return JSONResponse(await web.read(reads.shares_now, name, tenants))


async def starvation(web: Web, request: Request) -> Response:
    starving, throttled, starving_count, throttled_count = await web.read(reads.starvation, web.limits)
    return web.render(
        request,
        "starvation.html",
        starving=starving,
        throttled=throttled,
        starving_count=starving_count,
        throttled_count=throttled_count,
        threshold=web.limits.starving_after_seconds,
    )


async def aggregates(web: Web, request: Request) -> Response:
    report = await web.read(read_status, web.settings, web.limits)
    gaps = await web.read(reads.gap_waits, BLOCKED_SHOWN)
    return web.render(request, "aggregates.html", status=report, gaps=gaps)


async def dead_jobs(web: Web, request: Request) -> Response:
    params = request.query_params
    queue, tenant, code = optional(params, "queue"), optional(params, "tenant"), optional(params, "code")
    if queue is not None:
        enqueue.check_queue_name(queue)
    if tenant is not None:
        enqueue.check_label("tenant", tenant, enqueue.MAX_TENANT_CHARS)
    if code is not None:
        enqueue.check_label("error code", code, 200)
    limit_text = params.get("limit", str(DEAD_LIMITS[0]))
    if limit_text not in {str(n) for n in DEAD_LIMITS}:
        raise InvalidInput(f"limit must be one of {', '.join(map(str, DEAD_LIMITS))}")
    since_text = optional(params, "since")

    def read(conn: Any) -> Any:
        since = None
        if since_text is not None:
            since = parse_since(since_text[:40], reads.database_now(conn))
        return reads.dead_newest(
            conn, queue=queue, tenant=tenant, code=code, since=since, limit=int(limit_text)
        )

    found = await web.read(read)
    filters = {"queue": queue or "", "tenant": tenant or "", "code": code or "", "since": since_text or ""}
    return web.render(
        request, "dead.html", jobs=found, filters=filters, limit=int(limit_text), limits=DEAD_LIMITS
    )


async def job(web: Web, request: Request) -> Response:
    found = await web.call(web.client.job_show, job_id(request.path_params["id"]))
    size, preview = reads.payload_preview(found.pop("payload"), web.web.payload_preview)
    attempts = [h for h in found["history"] if h["kind"] == "attempt"]
    events = [h for h in found["history"] if h["kind"] != "attempt"]
    return web.render(
        request,
        "job.html",
        job=found,
        size=size,
        preview=preview,
        preview_allowed=web.web.payload_preview,
        attempts=attempts,
        events=events,
    )
