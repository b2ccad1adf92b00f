"""What one request to `tracelake view` may ask, checked in one place before any work (app.py's
middleware, for every route, unknown pages and static files included), so that no URL can make a
request slow: its size, its parameters, its search words, and who sent it.

- The URL (path and query string) is at most MAX_URL bytes: 414. (uvicorn itself refuses a request
  head over 16 KiB before the app sees it.)
- At most MAX_PARAMS query parameters: 400.
- A search (`q`) has at most MAX_WORDS words (runs of letters and digits, as the index's tokenizer
  splits them) and no word over MAX_WORD characters, the index's longest token (a longer one is
  never indexed, so it could match nothing): 400.
- A request another site's page made (`Sec-Fetch-Site: cross-site`) is refused, 403, unless it is the
  reader opening a page (`Sec-Fetch-Mode: navigate` into a window, `Sec-Fetch-Dest: document`): a
  script's fetch, an image, a frame or a form another site holds never runs a query here. A request
  without these headers (curl, an older browser) is not refused: the Host check (app.py) and the
  budget on each request's queries (db.py's REQUEST_SECONDS) still hold.

What a request that passes may cost is bounded by db.py (REQUEST_SECONDS of DuckDB work) and by the
search's caps here (LanceDB's search cannot be interrupted, so its words are capped instead).
"""

from __future__ import annotations

import re
from typing import Mapping

from tracelake.core.errors import BadInput
from tracelake.explore.view.search import MAX_TOKEN

MAX_URL = 8192  # bytes of a request's path and query string
MAX_PARAMS = 64  # query parameters of one request
MAX_WORDS = 32  # words of one search
MAX_WORD = MAX_TOKEN  # characters of one search word: the index's longest token (search.py)
_WORD = re.compile(r"[^\W_]+")


class Refused(BadInput):
    """A request refused before any work: its status and one line saying why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def check(params: list[tuple[str, str]], headers: Mapping[str, str]) -> None:
    """Refused when the request's parameters are over a cap or another site's page made it (see the
    module). `params` are the parsed query parameters: parse them once `check_size` has passed."""
    if len(params) > MAX_PARAMS:
        raise Refused(400, f"view: {len(params):,} query parameters; a request takes at most {MAX_PARAMS}")
    for name, value in params:
        if name == "q":
            check_search(value)
    check_site(headers)


def check_size(path: str, query_string: bytes) -> None:
    """The URL's bytes (path and query string) at most MAX_URL."""
    size = len(path.encode("utf-8", "surrogatepass")) + len(query_string)
    if size > MAX_URL:
        raise Refused(414, f"view: the URL is {size:,} bytes; a request takes at most {MAX_URL:,}")


def check_search(text: str) -> None:
    """A search's words: at most MAX_WORDS of them, none over MAX_WORD characters."""
    words = _WORD.findall(text)
    if len(words) > MAX_WORDS:
        raise Refused(400, f"view: a search takes at most {MAX_WORDS} words, not {len(words):,}")
    longest = max(words, key=len, default="")
    if len(longest) > MAX_WORD:
        raise Refused(
            400,
            f"view: a search word is at most {MAX_WORD} characters (the index's longest), not {len(longest):,}",
        )


def check_site(headers: Mapping[str, str]) -> None:
    """Another site's page may open a page here in a window (a link), nothing else."""
    if headers.get("sec-fetch-site", "").lower() != "cross-site":
        return
    mode, dest = headers.get("sec-fetch-mode", "").lower(), headers.get("sec-fetch-dest", "").lower()
    if mode != "navigate" or dest not in ("document", ""):
        raise Refused(
            403,
            f"view: a request made by another site's page ({mode or 'no mode'}, {dest or 'no destination'}) "
            "is refused; open the page from its address",
        )
