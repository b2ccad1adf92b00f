"""`tracelake view`: the lake's trajectories in a web page served on 127.0.0.1 (Starlette + uvicorn,
server-rendered HTML, a little plain JavaScript from static/; nothing fetched from the network).

    db.py     the queries (sql/viewer/*.sql) on one read-only `lake_connection`, behind a lock
    html.py   the pages: each gathers its values and renders its template (templates/)
    trace.py  one trajectory's values (messages, task, datasets, training row)
    render.py the Jinja2 environment: autoescape on, the one place values are escaped
    app.py    the routes and `serve`
"""
