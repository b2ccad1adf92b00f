"""The Jinja2 environment of `tracelake view`: every page is a template in templates/, rendered with
autoescape on, so a value from the lake reaches a page only as escaped text.

Escaping happens in one place: every `{{ value }}` goes through `finalize` (html.escape, quotes
included: the entities the pages always had; None is empty), then through Jinja's autoescape, which
leaves the already-escaped Markup alone. A value the templates must show as HTML is Markup made by
code that escapes: `text_html` (the ANSI converter of ansi.py, or plain escaping), the diff report of
explore/diff_html.py and the package's own stylesheets in an exported file (`trusted`). No template
uses `|safe` or turns autoescape off; tests/explore/test_view_templates.py holds them to it.

No page holds a control character of the data: `render`, the one way a page or an exported HTML file
is made, passes what a template wrote through core/ui.py's `printable` (the CLI's escaping), so an
ESC, a C1 control (\\x9b), a BEL ending an OSC sequence or a bidirectional override shows as a visible
escape (`\\x1b`, `\\u202e`) wherever it came from: a value escaped by `finalize`, a terminal output
converted by ansi.py, or Markup built by other escaping code (the diff report). The templates write
no control character of their own; \\n and \\t stay, an SGR colour sequence outside ansi.py is dropped.
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import BaseLoader, Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from tracelake.core.ui import printable
from tracelake.explore.view.ansi import ansi_html, has_ansi


def esc(value: Any) -> str:
    """Text as HTML: &, <, >, " and ' escaped; None is empty."""
    return "" if value is None else html.escape(str(value), quote=True)


def _finalize(value: Any) -> Any:
    """Every `{{ value }}` of a template: Markup as it is, anything else escaped by `esc`."""
    return value if hasattr(value, "__html__") else Markup(esc(value))


def text_html(text: str) -> Markup:
    """Text for a <pre>: escaped, its ANSI colours (terminal output) as classes of ansi.css."""
    return Markup(ansi_html(text)) if has_ansi(text) else Markup(esc(text))


def trusted(html_text: str) -> Markup:
    """HTML that code of this package built by escaping every value it holds (explore/diff_html.py's
    report) or that the package ships (its stylesheets): shown as it is."""
    return Markup(html_text)


def url(path: str, params: dict[str, str] | None = None) -> str:
    """A URL (not escaped: the template escapes it) for a path and query parameters."""
    query = urlencode(params or {})
    return path + ("?" + query if query else "")


def trace_url(trajectory_id: str, params: dict[str, str]) -> str:
    """The URL of a trajectory's page, keeping the list's parameters."""
    return url(f"/t/{quote(trajectory_id, safe='')}", params)


def _commas(value: Any) -> str:
    return f"{value:,}"


def _whole(value: Any) -> str:
    return "" if value is None else f"{value:,.0f}"


def _g(value: Any) -> str:
    return "" if value is None else f"{value:g}"


def make_environment(loader: BaseLoader | None = None) -> Environment:
    """The viewer's environment (autoescape on for every template, whatever its name) over the
    package's templates/, or over `loader`."""
    env = Environment(
        loader=loader or PackageLoader("tracelake.explore.view", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(commas=_commas, whole=_whole, g=_g)
    env.globals.update(text_html=text_html, url=url, trace_url=trace_url)
    return env


ENV = make_environment()


def render(name: str, **context: Any) -> str:
    """A template of templates/ rendered with `context`, every control character of it visible."""
    return printable(ENV.get_template(name).render(**context))
