"""ANSI terminal text as HTML for `tracelake view` (explore/view/ansi.py).

Hostile text stays escaped inside coloured runs; each SGR attribute, reset and colour form maps to
its class; every other escape sequence and control is removed; malformed sequences never raise.
The properties build text from known plain pieces and known escape sequences, so the expected
plain text is known without re-implementing the tokeniser.
"""

from __future__ import annotations

import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelake.explore.view.ansi import XTERM16, ansi_html, has_ansi, nearest16, strip_ansi

PROPS = settings(max_examples=400, deadline=None)
E = "\x1b"
TAG = re.compile(r'<span class="([a-z0-9 -]+)">|</span>')
CLASSES = {"a-b", "a-d", "a-i", "a-u", "a-inv"} | {f"a-{k}{i}" for k in "fg" for i in range(16)}


def spans(out: str) -> list[tuple[str, str]]:
    """The (class, escaped text) of each top-level run; plain text has class ''."""
    result, pos, cls = [], 0, ""
    for m in TAG.finditer(out):
        if out[pos : m.start()]:
            result.append((cls, out[pos : m.start()]))
        cls, pos = (m.group(1) or ""), m.end()
    if out[pos:]:
        result.append((cls, out[pos:]))
    return result


def check_structure(out: str) -> str:
    """Assert the HTML is well formed (flat, balanced, non-empty spans, known classes, nothing raw)
    and return its text, tags stripped and unescaped."""
    assert E not in out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out)
    depth = 0
    for m in TAG.finditer(out):
        if m.group(0) == "</span>":
            depth -= 1
            assert depth == 0
        else:
            assert depth == 0  # spans never nest
            depth += 1
            assert set(m.group(1).split()) <= CLASSES
            assert len(m.group(1).split()) == len(set(m.group(1).split()))
    assert depth == 0
    assert "></span>" not in out  # never an empty span
    text = TAG.sub("", out)
    assert not set(text) & set("<>\"'")  # all of it escaped
    return html.unescape(text)


# --- escaping ------------------------------------------------------------------------------------


def test_hostile_text_in_a_coloured_run_is_escaped():
    out = ansi_html(f"{E}[31m<script>alert(\"x\")</script>{E}[0m & 'q' <b>")
    assert out == (
        '<span class="a-f1">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</span> &amp; &#x27;q&#x27; &lt;b&gt;'
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain",
        "<a href=\"x\">'&amp;'</a>",
        "tab\tnew\nline",
        "unicode é ✓ \u2028 \x85 \U0001f600",
        "[31m not an escape",
    ],
)
def test_text_without_escapes_is_just_escaped(text):
    assert ansi_html(text) == html.escape(text, quote=True)
    assert not has_ansi(text)


def test_carriage_returns_are_dropped():
    assert ansi_html("a\r\nb\r\n") == "a\nb\n"
    assert ansi_html("old\rnew") == "oldnew"
    assert ansi_html("a\r\r\nb") == "a\nb"


# --- attributes, resets, colours -----------------------------------------------------------------


@pytest.mark.parametrize("code,cls", [(1, "a-b"), (2, "a-d"), (3, "a-i"), (4, "a-u"), (7, "a-inv")])
def test_each_attribute(code, cls):
    assert ansi_html(f"{E}[{code}mx") == f'<span class="{cls}">x</span>'


def test_attributes_and_colours_combine_in_a_fixed_order():
    assert spans(ansi_html(f"{E}[42;31;4;3;1mx")) == [("a-b a-i a-u a-f1 a-g2", "x")]


@pytest.mark.parametrize(
    "on,off,left",
    [
        ("1;2;3", "22", "a-i"),
        ("3;4", "23", "a-u"),
        ("4;1", "24", "a-b"),
        ("7;1", "27", "a-b"),
        ("31;42", "39", "a-g2"),
        ("31;42", "49", "a-f1"),
        ("1;31;42", "0", ""),
        ("1;31;42", "", ""),
        ("1", ";3", "a-i"),
        ("4", "4:0", ""),
        ("1", "5;8;9;21;53", "a-b"),
    ],
)
def test_resets(on, off, left):
    assert ansi_html(f"{E}[{on}m{E}[{off}mb") == (f'<span class="{left}">b</span>' if left else "b")


def test_runs_close_and_reopen_at_each_change():
    assert ansi_html(f"{E}[31ma{E}[1mb{E}[0mc") == ('<span class="a-f1">a</span><span class="a-b a-f1">b</span>c')
    assert ansi_html(f"{E}[31m{E}[0m") == ""  # never an empty span
    assert ansi_html(f"{E}[31m{E}[32mx{E}[32my") == '<span class="a-f2">xy</span>'
    assert ansi_html(f"{E}[31ma{E}[Kb{E}[2Jc") == '<span class="a-f1">abc</span>'


@pytest.mark.parametrize(
    "seq,cls",
    [
        ("30", "a-f0"),
        ("37", "a-f7"),
        ("90", "a-f8"),
        ("97", "a-f15"),
        ("40", "a-g0"),
        ("47", "a-g7"),
        ("100", "a-g8"),
        ("107", "a-g15"),
        ("38;5;3", "a-f3"),
        ("48;5;12", "a-g12"),
        ("38;5;196", "a-f9"),
        ("38;5;46", "a-f10"),
        ("38;5;21", "a-f4"),
        ("38;5;16", "a-f0"),
        ("38;5;231", "a-f15"),
        ("38;5;232", "a-f0"),
        ("38;5;244", "a-f8"),
        ("38;5;250", "a-f7"),
        ("48;5;255", "a-g7"),
        ("38;2;255;0;0", "a-f9"),
        ("38;2;200;0;0", "a-f1"),
        ("48;2;250;250;250", "a-g15"),
        ("38;2;0;0;0", "a-f0"),
        ("38;2;90;90;250", "a-f12"),
        ("38:5:196", "a-f9"),
        ("38:2::255:0:0", "a-f9"),
        ("38:2:0:205:0", "a-f2"),
        ("48:5:4", "a-g4"),
        ("38;5;1;48;5;2", "a-f1 a-g2"),
        ("38;2;0;0;238;1", "a-b a-f4"),
    ],
)
def test_colours(seq, cls):
    assert ansi_html(f"{E}[{seq}mx") == f'<span class="{cls}">x</span>'


def test_nearest16_is_exact_on_the_palette_and_total():
    assert [nearest16(*rgb) for rgb in XTERM16] == list(range(16))
    for n in range(256):  # every 256-colour index maps somewhere, deterministically
        out = ansi_html(f"{E}[38;5;{n}mx")
        assert out == ansi_html(f"{E}[38;5;{n}mx")
        assert re.fullmatch(r'<span class="a-f(\d+)">x</span>', out)


def test_inverse_swaps_the_colours():
    assert spans(ansi_html(f"{E}[7;31mx")) == [("a-inv a-g1", "x")]
    assert spans(ansi_html(f"{E}[7;44mx")) == [("a-inv a-f4", "x")]
    assert spans(ansi_html(f"{E}[31;44;7mx{E}[27my")) == [("a-inv a-f4 a-g1", "x"), ("a-f1 a-g4", "y")]


# --- everything else is removed ------------------------------------------------------------------


@pytest.mark.parametrize(
    "seq",
    [
        "[2J",
        "[10;20H",
        "[K",
        "[0K",
        "[?25l",
        "[?1049h",
        "[>4;2m",
        "[?1m",
        "[0 q",
        "[1;2;3 m",
        "[<35;1;2M",
        "]0;title\x07",
        "]8;;http://x/?a=<b>\x1b\\",
        "]2;unterminated",
        "(B",
        ")0",
        "=",
        ">",
        "7",
        "8",
        "M",
        "c",
        "P1$r<x>\x1b\\",
        "_apc\x07",
        "^pm\x1b\\",
        "[",
        "[31",
        "[38;5",
        "",
        "\x1b",
    ],
)
def test_other_sequences_are_removed(seq):
    out = ansi_html(f"a{E}{seq}")
    assert out == "a" and strip_ansi(f"a{E}{seq}") == "a"
    assert ansi_html(f"<{E}{seq}\n>") == "&lt;\n&gt;"


def test_an_unterminated_string_stops_at_the_line_end():
    assert ansi_html(f"a{E}]0;title\nb<") == "a\nb&lt;"
    assert ansi_html(f"a{E}]0;title{E}[31mb") == 'a<span class="a-f1">b</span>'


def test_controls_other_than_newline_and_tab_are_removed():
    assert ansi_html("a\x00b\x07c\x08d\x0be\x0cf\x7fg\x1fh\ti\nj") == "abcdefgh\ti\nj"


@pytest.mark.parametrize(
    "seq",
    [
        "38;5",
        "38;5;300",
        "38;2;1;2",
        "38;2;300;0;0",
        "999",
        "48;9;1",
        "38",
        "9" * 5000,
        "38;5;" + "9" * 5000,
        ";;;",
        "38:5",
        "38:2:1",
        "38:2:1:2:999",
        "::::",
        "38;" * 10000,
        "1;" * 10000,
        "4:",
        "0" * 10,
    ],
)
def test_malformed_parameters_are_ignored(seq):
    out = ansi_html(f"{E}[{seq}m<x>")
    assert check_structure(out) == "<x>"
    assert "a-f" not in out and "a-g" not in out


def test_a_reset_inside_malformed_parameters_still_counts():
    assert spans(ansi_html(f"{E}[31m{E}[38;5;1;;;1mx")) == [("a-b", "x")]


def test_has_ansi():
    assert has_ansi(f"a{E}[31mb") and has_ansi(E)
    assert not has_ansi("a\r\nb\x07")


def test_large_input_smoke():
    line = f"{E}[1;32muser@host{E}[0m:{E}[34m~/dir{E}[0m$ ls <x>{E}[K\r\n"
    out = ansi_html(line * 50_000)  # ~2.5 MB; linear, but no timing is asserted
    assert check_structure(out) == "user@host:~/dir$ ls <x>\n" * 50_000
    assert ansi_html(E * 200_000) == "" and ansi_html(f"{E}[" * 100_000) == ""


# --- properties ----------------------------------------------------------------------------------

PLAIN = st.text(
    st.one_of(
        st.sampled_from("<>&\"'[];:m0123456789\\ \n\tabc"),
        st.characters(
            blacklist_categories=("Cs",),
            blacklist_characters="\x1b\x7f" + "".join(chr(c) for c in range(32) if c not in (9, 10)),
        ),
    ),
    max_size=12,
)
CONTROL = st.sampled_from(["\r", "\r\n", "\x00", "\x07", "\x08", "\x7f", "\x0c", "\x1f"])
NUMBER = st.one_of(st.integers(0, 300).map(str), st.just(""), st.just("99999999"))
PARAMS = st.lists(NUMBER, max_size=8).map(";".join)
SGR = st.one_of(
    PARAMS,
    st.sampled_from(["38;5;", "48;5;", "38;2;", "48;2;", "38:5:", "38:2::"]).flatmap(
        lambda head: st.lists(st.integers(0, 255).map(str), min_size=1, max_size=3).map(
            lambda xs: head + (":" if ":" in head else ";").join(xs)
        )
    ),
).map(lambda p: f"{E}[{p}m")
OTHER_CSI = (
    st.tuples(
        st.sampled_from(["", "?", ">", "<", "="]),
        PARAMS,
        st.sampled_from(["", " ", "$"]),
        st.sampled_from(list("@ABCDHJKhlmqrsu~")),
    )
    .filter(lambda t: not (t[0] == "" and t[2] == "" and t[3] == "m"))
    .map(lambda t: f"{E}[{t[0]}{t[1]}{t[2]}{t[3]}")
)
STRING_BODY = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=10)
OSC = st.tuples(st.sampled_from("]P^_X"), STRING_BODY, st.sampled_from(["\x07", f"{E}\\"])).map(
    lambda t: f"{E}{t[0]}{t[1]}{t[2]}"
)
TWO_BYTE = st.tuples(st.sampled_from(["", "(", ")", "#", " "]), st.sampled_from(list("78=>MDEcB0"))).map(
    lambda t: f"{E}{t[0]}{t[1]}"
)
SEQUENCE = st.one_of(SGR, OTHER_CSI, OSC, TWO_BYTE, CONTROL)
PIECES = st.lists(st.one_of(PLAIN.map(lambda s: ("text", s)), SEQUENCE.map(lambda s: ("seq", s))), max_size=30)


@PROPS
@given(PIECES, st.sampled_from(["", E, f"{E}[", f"{E}[31", f"{E}]0;x", f"{E}("]))
def test_output_is_the_text_without_its_sequences(pieces, tail):
    text = "".join(s for _, s in pieces) + tail
    expected = "".join(s if kind == "text" else ("\n" if s == "\r\n" else "") for kind, s in pieces)
    out = ansi_html(text)
    assert check_structure(out) == expected
    assert strip_ansi(text) == expected
    if E not in text and not any(kind == "seq" for kind, _ in pieces):
        assert out == html.escape(text, quote=True)


@PROPS
@given(st.text(st.one_of(st.sampled_from(list("\x1b[]();:m0123456789\x07\\\r\n\t<>&\"'P_ ")), st.characters())))
def test_any_text_renders_without_raising(text):
    out = ansi_html(text)
    assert check_structure(out) == strip_ansi(text)
    assert len(strip_ansi(text)) <= len(text)
