"""The routes of `tracelake view` and `serve`, which binds 127.0.0.1 unless told another address.

/                 the list: ?where=SQL&source=…&task=…&rule=…&timed_out=yes|no&subagent=yes|no
                  &reward_min=…&reward_max=…&turns_min=…&turns_max=…&tokens_min=…&tokens_max=…&after=ID
                  &dataset=VIEW (rows of one dataset) &q=WORDS (full-text search; &page=N)
/t/ID?<the list's parameters>   one trajectory (its URL keeps the query it was opened from)
/compare?a=ID&b=ID  two rollouts side by side
/datasets           every dataset version of the lake
/diff?a=SPEC&b=SPEC the page form of `tracelake diff A B`
/export?format=jsonl|parquet|html&<the list's parameters>   the selection, downloaded
/static/view.css, /static/ansi.css, /static/view.js

Every route, static files and unknown pages included, answers only to the server's own names (the
Host header): the bound address, `localhost` and `127.0.0.1`. A web page can point its own domain at
127.0.0.1 (DNS rebinding) and read whatever a local server gives it; its requests carry its own
name, so they get a 400 and nothing of the lake. Bound to the wildcard 0.0.0.0 (a container's
forwarded port), the server answers to `localhost` and `127.0.0.1` only: 0.0.0.0 is no name a
browser asks for, and accepting any name would undo the check.

Every request is bounded before and while it works (limits.py, db.py): a URL over limits.MAX_URL
bytes, too many parameters or search words, or a request another site's page made (a script's fetch,
an image, a frame) is refused in one line before any work; the queries of one request run at most
db.REQUEST_SECONDS together, then it is answered 503 in one line. A lake being rebuilt under the
viewer (`dvc repro` swapping an output directory) is answered 503 too: "the lake is being rebuilt".
Every response, errors and refusals included, carries the same security headers (HEADERS).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
from importlib import resources
from pathlib import Path
from typing import Callable

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tracelake.core.errors import BadInput
from tracelake.explore.view import datasets, download, html, limits
from tracelake.explore.view.db import PAGE_ROWS, REBUILDING, LakeView, Query, Rebuilding, Unavailable, rebuilding

HOST = "127.0.0.1"
WILDCARD = "0.0.0.0"
LOOPBACK_NAMES = ("localhost", "127.0.0.1")
STATIC = {
    "view.css": "text/css; charset=utf-8",
    "ansi.css": "text/css; charset=utf-8",
    "view.js": "text/javascript; charset=utf-8",
}
# Defence in depth for hostile trace text: only this server's own script and style, nothing else.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=HEADERS)


def status_of(e: BadInput) -> int:
    """A request's error as its status: a refusal's own, 503 for a request stopped at its budget or a
    lake being rebuilt, else 400 (the request asked for something that cannot be)."""
    if isinstance(e, limits.Refused):
        return e.status
    return 503 if isinstance(e, Unavailable) or rebuilding(e) else 400


class SecurityHeaders:
    """Every response gets HEADERS, whoever made it: a page, a static file, a refusal of the Host check
    or of limits.py, Starlette's own 404 and 405."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


class RequestLimits:
    """limits.py's checks on every request that passed the Host check, before any route runs: a
    refusal is its one-line page."""

    def __init__(self, app: ASGIApp, label: str) -> None:
        self.app, self.label = app, label

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                limits.check_size(scope.get("path", ""), scope.get("query_string", b""))
                request = Request(scope)
                limits.check(request.query_params.multi_items(), request.headers)
            except limits.Refused as e:
                await _html(html.not_found(str(e), label=self.label), e.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def allowed_hosts(address: str) -> list[str]:
    """The Host names a server bound to `address` answers to: `localhost`, `127.0.0.1` and the address
    itself, unless it is the wildcard (no client asks for 0.0.0.0 by name)."""
    return [*LOOPBACK_NAMES, *([address] if address not in (*LOOPBACK_NAMES, WILDCARD) else [])]


def create_app(db: LakeView, address: str = HOST) -> Starlette:
    """The ASGI app over one LakeView, answering only to the names of `address` (allowed_hosts).
    Endpoints are sync: Starlette runs them in its thread pool and the LakeView's lock serialises the
    connection."""

    def listing(request: Request) -> HTMLResponse:
        try:
            q = Query.from_params(request.query_params)
        except BadInput as e:
            return _html(
                html.list_page(Query(), [], 0, None, db.facet_values, label=db.label, error=str(e)), status_of(e)
            )
        state, capped = None, False
        try:
            if q.q and q.q.strip():
                rows, total, capped, state = db.search_page(q)
                number = q.page or 1
                next_after = str(number + 1) if total > number * PAGE_ROWS else None
            else:
                rows, total, next_after = db.page(q)
        except BadInput as e:
            return _html(
                html.list_page(q, [], 0, None, db.facet_values, label=db.label, error=str(e), columns=db.columns),
                status_of(e),
            )
        return _html(
            html.list_page(
                q,
                rows,
                total,
                next_after,
                db.facet_values,
                label=db.label,
                opened=request.query_params.get("open"),
                columns=db.columns,
                search_state=state,
                capped=capped,
            )
        )

    def trajectory(request: Request) -> HTMLResponse:
        trajectory_id = request.path_params["trajectory_id"]
        try:
            q = Query.from_params(request.query_params)
            row = db.trajectory(trajectory_id)
        except BadInput as e:
            return _html(html.not_found(str(e), label=db.label), status_of(e))
        if row is None:
            return _html(html.not_found(f"view: no trajectory {trajectory_id!r}", label=db.label), 404)
        return _html(html.trace_page(row, q, label=db.label, tokenizer=db.tokenizer))

    def compare(request: Request) -> HTMLResponse:
        try:
            q = Query.from_params(request.query_params)
            a, b = (db.trajectory(request.query_params.get(k, "")) for k in ("a", "b"))
        except BadInput as e:
            return _html(html.not_found(str(e), label=db.label), status_of(e))
        if a is None or b is None:
            return _html(html.not_found("view: compare takes two trajectory ids, ?a=ID&b=ID", label=db.label), 404)
        return _html(html.compare_page(a, b, q, label=db.label))

    def dataset_list(request: Request) -> HTMLResponse:
        return _html(datasets.datasets_page(db))

    def diff(request: Request) -> HTMLResponse:
        a, b = (request.query_params.get(k, "").strip() for k in ("a", "b"))
        if not (a and b):
            return _html(datasets.diff_page(db, a, b, None))
        try:
            report = datasets.diff_report(db, a, b)
        except BadInput as e:
            return _html(datasets.diff_page(db, a, b, None, error=str(e)), status_of(e))
        return _html(datasets.diff_page(db, a, b, report))

    def export_selection(request: Request) -> Response:
        fmt = request.query_params.get("format", "")
        if fmt not in download.FORMATS:
            return _html(
                html.not_found(f"view: export format {fmt!r}: one of {', '.join(download.FORMATS)}", label=db.label),
                400,
            )
        try:
            q = Query.from_params(request.query_params)
            ids = download.selected_ids(db, q)
            body = {
                "jsonl": lambda: download.jsonl(db, ids),
                "parquet": lambda: download.parquet(db, ids),
                "html": lambda: download.html_file(db, ids, q),
            }[fmt]()
            first = next(body, b"")  # what fails at the start (a file the rebuild took) fails before the status
        except BadInput as e:
            return _html(html.not_found(str(e), label=db.label), status_of(e))
        name = f"tracelake-{len(ids)}.{fmt}"

        def chunks():
            yield first
            yield from body

        return StreamingResponse(
            chunks(),
            media_type=download.FORMATS[fmt],
            headers={**HEADERS, "Content-Disposition": f'attachment; filename="{name}"'},
        )

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return _html(html.not_found(f"view: no file {name!r}", label=db.label), 404)
        body = (resources.files("tracelake.explore.view") / "static" / name).read_bytes()
        return Response(body, media_type=STATIC[name], headers=HEADERS)

    def missing(request: Request, exc: Exception) -> HTMLResponse:
        return _html(html.not_found(f"view: no page {request.url.path!r}", label=db.label), 404)

    def refused(request: Request, exc: Exception) -> HTMLResponse:
        status = exc.status_code if isinstance(exc, HTTPException) else 400
        if status == 405:
            message = f"view: {request.method} is not allowed here (the viewer answers GET and HEAD only)"
        else:
            message = f"view: {exc.detail if isinstance(exc, HTTPException) else 'the request was refused'}"
        return _html(html.not_found(message, label=db.label), status)

    def failed(request: Request, exc: Exception) -> HTMLResponse:
        return _html(html.not_found(f"view: this page failed ({type(exc).__name__})", label=db.label), 500)

    def favicon(request: Request) -> Response:
        return Response(status_code=204, headers=HEADERS)

    def bounded(endpoint: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """The endpoint with its queries under the request's budget (db.REQUEST_SECONDS); an error it
        does not answer itself is one line with its status (503: stopped, or the lake being rebuilt)."""

        @functools.wraps(endpoint)
        def run(request: Request) -> Response:
            try:
                with db.request_budget():
                    return endpoint(request)
            except BadInput as e:
                return _html(html.not_found(str(e), label=db.label), status_of(e))
            except FileNotFoundError as e:  # a file of the lake gone between listing and reading it
                if not _inside(e.filename, db.lake):
                    raise
                gone = Rebuilding(f"{REBUILDING} ({e.filename} vanished); reload the page")
                return _html(html.not_found(str(gone), label=db.label), 503)

        return run

    routes = [
        Route("/", bounded(listing)),
        Route("/t/{trajectory_id}", bounded(trajectory)),
        Route("/compare", bounded(compare)),
        Route("/datasets", bounded(dataset_list)),
        Route("/diff", bounded(diff)),
        Route("/export", bounded(export_selection)),
        Route("/static/{name}", static),
        Route("/favicon.ico", favicon),
    ]
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(address), www_redirect=False),
        Middleware(RequestLimits, label=db.label),
    ]
    handlers = {404: missing, HTTPException: refused, Exception: failed}
    return Starlette(routes=routes, exception_handlers=handlers, middleware=middleware)


def _inside(path, root: Path) -> bool:
    """Whether `path` (a str, or None) lies in the directory `root`."""
    if not isinstance(path, str):
        return False
    return os.path.abspath(path).startswith(os.path.abspath(root) + os.sep)


def check_address(host: str) -> str:
    """`host` as one IPv4 address (127.0.0.1, 0.0.0.0 or an interface's); anything else, a name
    included, is a one-line error: the Host check compares names to the address as written."""
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        raise BadInput(
            f"view: --host {host!r} is not an IPv4 address (127.0.0.1, 0.0.0.0 or one of this machine's addresses)"
        ) from None


def bind(port: int, host: str = HOST) -> socket.socket:
    """A listening socket on host:port (0: any free port); a port in use is a one-line error."""
    host = check_address(host)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise BadInput(f"view: cannot listen on {host}:{port}: {e.strerror or e} (choose another --port)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    lake: Path | str,
    port: int,
    *,
    label: str = "",
    announce=print,
    search_cache: Path | str | None = None,
    lake_in_repo: str = "lake",
    host: str = HOST,
    project: Path | None = None,
) -> None:
    """Open the lake, bind host:port, print the URL and serve until Ctrl-C. With `search_cache`,
    the full-text index is opened from it, or built there on a background thread. With `project`
    (the DVC project of a workspace lake), DVC's status of its datasets is asked on another thread."""
    import uvicorn

    host = check_address(host)
    db = LakeView(lake, label=label, lake_in_repo=lake_in_repo)
    sock = bind(port, host)
    config = uvicorn.Config(create_app(db, host), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    bound = sock.getsockname()[1]
    if not ipaddress.IPv4Address(host).is_loopback:
        announce(f"tracelake view: {exposure(host, bound)}")
    announce(
        f"tracelake view: http://{HOST if host == WILDCARD else host}:{bound}/  ({label or lake}; Ctrl-C stops it)"
    )
    if project is not None:
        db.start_freshness(project)
    if search_cache is not None:
        index = db.start_search(search_cache, announce=announce)
        if not index.ready and index.key:
            announce(f"tracelake view: building the search index in {index.path} (pages work meanwhile)")
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down on Ctrl-C, then raises the signal again
        pass
    finally:
        sock.close()
        if db.search is not None:
            db.search.stop()
    announce("tracelake view: stopped")


def exposure(host: str, port: int) -> str:
    """Who can read the lake when it is served on a non-loopback address, and under which names."""
    if host == WILDCARD:
        return (
            f"listening on {host}:{port}: any machine that reaches this one can read the lake; pages "
            f"answer only to {' and '.join(LOOPBACK_NAMES)} (a forwarded port)"
        )
    return f"listening on {host}:{port}: anyone who can reach {host} can read the lake"
