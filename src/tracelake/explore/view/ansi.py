"""Terminal text (ANSI escape sequences) as safe HTML, for observations such as tmux captures.

`ansi_html` escapes every piece of text with html.escape (quotes included) and turns SGR
sequences (ESC[...m) into <span class="..."> runs; the classes are styled by static/ansi.css,
since the viewer's CSP forbids inline styles:

  a-b bold, a-d dim, a-i italic, a-u underline, a-inv inverse (fore- and background classes are
  swapped too), a-f0..a-f15 foreground, a-g0..a-g15 background. 256-colour indices 16-255 and
  24-bit colours map to the nearest of the 16 xterm colours (squared RGB distance, lower index on
  a tie).

Every other escape sequence is removed, never shown: CSI (cursor moves, erase, private modes),
OSC/DCS/PM/APC strings up to BEL, ESC \\ or the end of the line (so an unterminated one never
swallows the rest of the text), two-byte ones such as ESC(B, and a lone ESC. So is every other
C0 control but \\n and \\t, and DEL. A carriage return is dropped: \\r\\n reads as \\n, and a line
overwritten through a lone \\r shows the old and the new text one after the other.
Malformed parameters (ESC[38;5m, ESC[999m) are ignored. One regular expression tokenises the text,
so the work is linear in its length; no input makes these functions raise.
"""

from __future__ import annotations

import functools
import html
import re

_SGR_OR_JUNK = r"""
    (?P<text>[^\x00-\x08\x0b-\x1f\x7f]+)
  | \x1b\[(?P<sgr>[0-9;:]*)m
  | (?:\x1b\[(?![0-9;:]*m)[0-?]*[ -/]*[@-~]?  # any other CSI, maybe unterminated
     | \x1b[\]P^_X][^\x07\x1b\n]*(?:\x07|\x1b\\)?  # OSC, DCS, SOS, PM, APC
     | \x1b(?!\[)[ -/]*[0-~]?  # two-byte ones (ESC(B, ESC=, ESC7), a lone ESC
     | [\x00-\x08\x0b-\x1a\x1c-\x1f\x7f]+  # any other controls, \r included
    )+
"""
_TOKEN = re.compile(_SGR_OR_JUNK, re.VERBOSE)
MAX_PARAMS = 64  # parameters of one SGR sequence past these are ignored
_State = tuple[tuple[str, int], ...]  # sorted items of a state: flags b d i u inv, colours fg bg

XTERM16 = [  # the 16 xterm colours as RGB, by index
    (0, 0, 0),
    (205, 0, 0),
    (0, 205, 0),
    (205, 205, 0),
    (0, 0, 238),
    (205, 0, 205),
    (0, 205, 205),
    (229, 229, 229),
    (127, 127, 127),
    (255, 0, 0),
    (0, 255, 0),
    (255, 255, 0),
    (92, 92, 255),
    (255, 0, 255),
    (0, 255, 255),
    (255, 255, 255),
]
_CUBE = (0, 95, 135, 175, 215, 255)


def nearest16(r: int, g: int, b: int) -> int:
    """The index (0-15) of the xterm colour nearest to an RGB colour; a tie goes to the lower."""

    def dist(i: int) -> int:
        x, y, z = XTERM16[i]
        return (x - r) ** 2 + (y - g) ** 2 + (z - b) ** 2

    return min(range(16), key=lambda i: (dist(i), i))


def _index16(n: int) -> int:
    """One of the 16 colours for an index of the 256-colour palette."""
    if n < 16:
        return n
    if n < 232:
        n -= 16
        return nearest16(_CUBE[n // 36], _CUBE[n // 6 % 6], _CUBE[n % 6])
    grey = 8 + 10 * (n - 232)
    return nearest16(grey, grey, grey)


def _num(s: str) -> int | None:
    """A parameter's value (empty is 0), None where it isn't a plausible number."""
    return (int(s) if s else 0) if not s or (s.isdigit() and len(s) < 6) else None


def _extended(args: list[str], i: int) -> tuple[int | None, int]:
    """The colour of 38/48's arguments at args[i:] (5;N or 2;R;G;B) and how many it used."""
    mode = _num(args[i]) if i < len(args) else None
    if mode == 5 and i + 1 < len(args):
        n = _num(args[i + 1])
        return (_index16(n) if n is not None and n < 256 else None), 2
    if mode == 2 and i + 3 < len(args):
        r, g, b = (_num(a) for a in args[i + 1 : i + 4])
        if r is not None and g is not None and b is not None and max(r, g, b) < 256:
            return nearest16(r, g, b), 4
        return None, 4
    return None, len(args) - i  # not understood: ignore the rest of the sequence


_FLAGS = {1: "b", 2: "d", 3: "i", 4: "u", 7: "inv"}
_RESETS = {22: ("b", "d"), 23: ("i",), 24: ("u",), 27: ("inv",), 39: ("fg",), 49: ("bg",)}


def _sgr(state: dict[str, int], params: str) -> None:
    """Apply one SGR sequence's parameters to the state, ignoring what it doesn't understand."""
    parts = params.split(";", MAX_PARAMS)[:MAX_PARAMS]
    i = 0
    while i < len(parts):
        sub = parts[i].split(":")  # colon sub-parameters: 38:5:N, 38:2::R:G:B, 4:0
        i += 1
        code = _num(sub[0])
        if code in (38, 48):
            if len(sub) > 1:
                args = ["2"] + sub[-3:] if sub[1] == "2" and len(sub) >= 6 else sub[1:]
                colour, _ = _extended(args, 0)
            else:
                colour, used = _extended(parts, i)
                i += used
            if colour is not None:
                state["fg" if code == 38 else "bg"] = colour
        elif code == 0:
            state.clear()
        elif code == 4 and sub[1:2] == ["0"]:
            state.pop("u", None)
        elif code in _FLAGS:
            state[_FLAGS[code]] = 1
        elif code in _RESETS:
            for key in _RESETS[code]:
                state.pop(key, None)
        elif code is not None and (30 <= code <= 37 or 90 <= code <= 97):
            state["fg"] = code % 10 + (8 if code >= 90 else 0)
        elif code is not None and (40 <= code <= 47 or 100 <= code <= 107):
            state["bg"] = code % 10 + (8 if code >= 100 else 0)


def _classes(state: dict[str, int]) -> str:
    """The class attribute for a state; inverse swaps the fore- and background colours."""
    fg, bg = state.get("fg"), state.get("bg")
    names = [f"a-{k}" for k in ("b", "d", "i", "u", "inv") if k in state]
    if "inv" in state:
        fg, bg = bg, fg
    names += [f"a-f{fg}"] if fg is not None else []
    return " ".join(names + ([f"a-g{bg}"] if bg is not None else []))


@functools.lru_cache(maxsize=1024)
def _step(state: _State, params: str) -> tuple[_State, str]:
    """The state and class attribute after an SGR sequence (memoised: terminals repeat them)."""
    new = dict(state)
    _sgr(new, params)
    return tuple(sorted(new.items())), _classes(new)


def has_ansi(text: str) -> bool:
    """Whether the text holds an escape character, so is worth rendering through ansi_html."""
    return "\x1b" in text


def strip_ansi(text: str) -> str:
    """The text with every escape sequence and control but \\n and \\t removed (as ansi_html)."""
    return "".join(m.group("text") or "" for m in _TOKEN.finditer(text))


def _run(cls: str, run: list[str]) -> str:
    body = html.escape("".join(run), quote=True)
    return f'<span class="{cls}">{body}</span>' if cls and body else body


def ansi_html(text: str) -> str:
    """Terminal text as HTML: escaped text in <span class="a-..."> runs for its SGR attributes."""
    out: list[str] = []
    run: list[str] = []
    state: _State = ()
    cls = ""
    for m in _TOKEN.finditer(text):
        if m.lastgroup == "text":
            run.append(m.group(1))
        elif m.lastgroup == "sgr":
            params = m.group(2)  # one too long to memoise is worked out afresh
            state, new = (_step if len(params) < 64 else _step.__wrapped__)(state, params)
            if new != cls:
                out.append(_run(cls, run))
                run, cls = [], new
    out.append(_run(cls, run))
    return "".join(out)
