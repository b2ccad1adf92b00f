"""The routes of `tracelake view` and `serve`, which binds 127.0.0.1 only.

/                 the list: ?where=SQL&source=…&task=…&rule=…&timed_out=yes|no&subagent=yes|no
                  &reward_min=…&reward_max=…&turns_min=…&turns_max=…&tokens_min=…&tokens_max=…&after=ID
                  &dataset=VIEW (rows of one dataset) &q=WORDS (full-text search; &page=N)
/t/ID?<the list's parameters>   one trajectory (its URL keeps the query it was opened from)
/compare?a=ID&b=ID  two rollouts side by side
/datasets           every dataset version of the lake
/diff?a=SPEC&b=SPEC the page form of `tracelake diff A B`
/export?format=jsonl|parquet|html&<the list's parameters>   the selection, downloaded
/static/view.css, /static/ansi.css, /static/view.js
"""

from __future__ import annotations

import socket
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from tracelake.core.errors import BadInput
from tracelake.explore.view import datasets, export, html
from tracelake.explore.view.db import PAGE_ROWS, LakeView, Query

HOST = "127.0.0.1"
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


def create_app(db: LakeView) -> Starlette:
    """The ASGI app over one LakeView. Endpoints are sync: Starlette runs them in its thread pool and
    the LakeView's lock serialises the connection."""

    def listing(request: Request) -> HTMLResponse:
        try:
            q = Query.from_params(request.query_params)
        except BadInput as e:
            return _html(html.list_page(Query(), [], 0, None, db.facet_values, label=db.label, error=str(e)), 400)
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
                html.list_page(q, [], 0, None, db.facet_values, label=db.label, error=str(e), columns=db.columns), 400
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
            return _html(html.not_found(str(e), label=db.label), 400)
        if row is None:
            return _html(html.not_found(f"view: no trajectory {trajectory_id!r}", label=db.label), 404)
        return _html(html.trace_page(row, q, label=db.label, tokenizer=db.tokenizer))

    def compare(request: Request) -> HTMLResponse:
        try:
            q = Query.from_params(request.query_params)
            a, b = (db.trajectory(request.query_params.get(k, "")) for k in ("a", "b"))
        except BadInput as e:
            return _html(html.not_found(str(e), label=db.label), 400)
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
            return _html(datasets.diff_page(db, a, b, None, error=str(e)), 400)
        return _html(datasets.diff_page(db, a, b, report))

    def export_selection(request: Request) -> Response:
        fmt = request.query_params.get("format", "")
        if fmt not in export.FORMATS:
            return _html(
                html.not_found(f"view: export format {fmt!r}: one of {', '.join(export.FORMATS)}", label=db.label), 400
            )
        try:
            q = Query.from_params(request.query_params)
            ids = export.selected_ids(db, q)
        except BadInput as e:
            return _html(html.not_found(str(e), label=db.label), 400)
        body = {
            "jsonl": lambda: export.jsonl(db, ids),
            "parquet": lambda: export.parquet(db, ids),
            "html": lambda: export.html_file(db, ids, q),
        }[fmt]()
        name = f"tracelake-{len(ids)}.{fmt}"
        return StreamingResponse(
            body,
            media_type=export.FORMATS[fmt],
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

    def favicon(request: Request) -> Response:
        return Response(status_code=204, headers=HEADERS)

    routes = [
        Route("/", listing),
        Route("/t/{trajectory_id}", trajectory),
        Route("/compare", compare),
        Route("/datasets", dataset_list),
        Route("/diff", diff),
        Route("/export", export_selection),
        Route("/static/{name}", static),
        Route("/favicon.ico", favicon),
    ]
    return Starlette(routes=routes, exception_handlers={404: missing})


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port (0: any free port); a port in use is a one-line error."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as e:
        sock.close()
        raise BadInput(f"view: cannot listen on {HOST}:{port}: {e.strerror or e} (choose another --port)") from None
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
) -> None:
    """Open the lake, bind 127.0.0.1:port, print the URL and serve until Ctrl-C. With `search_cache`,
    the full-text index is opened from it, or built there on a background thread."""
    import uvicorn

    db = LakeView(lake, label=label, lake_in_repo=lake_in_repo)
    sock = bind(port)
    config = uvicorn.Config(create_app(db), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    host, bound = sock.getsockname()[:2]
    announce(f"tracelake view: http://{host}:{bound}/  ({label or lake}; Ctrl-C stops it)")
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
