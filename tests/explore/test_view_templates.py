"""`tracelake view`'s templates (explore/view/templates/, rendered by explore/view/render.py): autoescape
is on for every template, whatever its name and whenever it is loaded; no template marks a value safe
or turns escaping off; and every page, rendered with hostile text in every text value it shows, holds
that text only as text: no tag, attribute, script or link of its own, and no template syntax run."""

from __future__ import annotations

import html
import io
import json
import re
import tarfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote_plus

import pytest
from jinja2 import FileSystemLoader, nodes

from tracelake.core.revisions import Recorded
from tracelake.explore.view import datasets, download
from tracelake.explore.view import html as pages
from tracelake.explore.view.db import Query
from tracelake.explore.view.render import ENV, make_environment
from tracelake.explore.view.search import Hit

from ..helpers import ROOT

VIEW = ROOT / "src" / "tracelake" / "explore" / "view"
HOSTILE = [
    "<script>alert(1)</script>",
    '"onmouseover="alert(1)" x="',
    "'onmouseover='alert(1)' x='",
    "{{ 7*191 }}{% if 1 %}jinja{% endif %}",
    "</textarea></pre></title></style><img src=x onerror=alert(1)>",
    "&lt;b&gt;already escaped&lt;/b&gt;",
    "javascript:alert(1)",
    "\x1b[31m<b onclick=alert(1)>red</b>\x1b[0m",
]
# Every element and attribute the viewer's own templates write; anything else came from data.
TAGS = set(
    "html head meta title link script style body header main nav a span form div label input select option "
    "button details summary code table thead tbody tr th td mark q h1 h2 h3 h4 dl dt dd section ul ol li "
    "pre datalist article p".split()
)
ATTRS = set(
    "lang charset name content rel href src defer class id method action for type value spellcheck "
    "placeholder inputmode size selected role list data-id data-scale data-view data-kind title".split()
)


# --- autoescape, everywhere --------------------------------------------------------------------------


def test_autoescape_is_on_for_every_template_even_ones_loaded_later(tmp_path):
    assert ENV.autoescape is True  # a bool, not a choice by file name
    names = ENV.list_templates()
    assert {"base.html", "list.html", "trace_body.html", "datasets.html"} <= set(names)
    for name in ("later.html", "later.htm", "later.txt", "later.xml", "later.j2", "later"):
        (tmp_path / name).write_text('<p title="{{ x }}">{{ x }}</p>')
    env = make_environment(FileSystemLoader(tmp_path))
    for name in env.list_templates():
        assert (
            env.get_template(name).render(x="<b>\"'&")
            == '<p title="&lt;b&gt;&quot;&#x27;&amp;">&lt;b&gt;&quot;&#x27;&amp;</p>'
        )
    assert ENV.from_string("{{ x }}").render(x="<i>") == "&lt;i&gt;"
    assert ENV.from_string("[{{ x }}]").render(x=None) == "[]"
    assert ENV.overlay().from_string("{{ x }}").render(x="<i>") == "&lt;i&gt;"


def test_no_template_marks_a_value_safe_or_turns_escaping_off():
    for name in ENV.list_templates():
        source = ENV.loader.get_source(ENV, name)[0]
        tree = ENV.parse(source)
        assert not list(tree.find_all((nodes.EvalContextModifier, nodes.MarkSafe, nodes.MarkSafeIfAutoescape))), name
        filters = {f.name for f in tree.find_all(nodes.Filter)}
        assert not filters & {"safe", "forceescape", "urlize", "xmlattr"}, (name, filters)
        assert not re.search(r"autoescape|\|\s*safe\b", source), name


def test_only_escaping_code_makes_markup():
    """Markup is made in render.py alone (text_html, finalize, trusted); `trusted` (pre-rendered HTML)
    is used for the diff report and the exported file's stylesheets, nowhere else."""
    for path in sorted(VIEW.glob("*.py")):
        text = path.read_text()
        if path.name != "render.py":
            assert "Markup(" not in text and "markupsafe" not in text, path.name
    callers = {p.name for p in VIEW.glob("*.py") if re.search(r"\btrusted\(", p.read_text())}
    assert callers == {"render.py", "datasets.py", "download.py"}


# --- hostile values in every page ----------------------------------------------------------------------


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_data(self, data):
        self.text.append(data)


def _check(page: str, hostile: str, *, scripts: int = 1) -> None:
    """The page shows `hostile` as text (somewhere) and holds nothing from it as markup."""
    parsed = _Page()
    parsed.feed(page)
    for tag, attrs in parsed.tags:
        assert tag in TAGS, (tag, attrs)
        for name, value in attrs:
            assert name in ATTRS, (tag, name, value)
            if name in ("href", "src", "action"):
                assert value is not None and value[:1] in ("/", "#", "?"), (tag, name, value)
    assert [a for t, a in parsed.tags if t == "script"] == [[("src", "/static/view.js"), ("defer", None)]] * scripts
    assert sum(t == "title" for t, _ in parsed.tags) == 1 and sum(t == "style" for t, _ in parsed.tags) <= 1
    text = "".join(parsed.text)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", hostile)
    assert shown in text  # rendered, as text
    values = text + "\n".join(unquote_plus(v or "") for _, attrs in parsed.tags for _, v in attrs)
    assert not re.search("1337|jinja", values.replace(HOSTILE[3], ""))  # template syntax is never run
    if re.search(r"[<>\"'&]", shown):
        assert shown not in page  # never raw


def _task_binary(h: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in ((f"task/{h}.md", h.encode()), ("task/blob.bin", b"\xff\xfe" * 10)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _trajectory(h: str, n: int, *, kept: bool = False) -> dict:
    """A trajectory row as LakeView.trajectory gives it, every text value `h`."""
    call = json.dumps({"commands": [{"keystrokes": h + "\n"}]})
    long = "\n".join([h] * 30)
    messages = [
        {"role": h, "content": h},
        {"role": "user", "content": f"<think>{h}</think>{h}"},
        {"role": "assistant", "content": f"<think>{h}</think>{call}"},
        {"role": "user", "content": long},
        {"role": "assistant", "content": h},
        {"role": "tool", "content": h},
        {"role": "assistant", "content": call},
        {"role": "user", "content": h},
    ]
    related = [
        {"trajectory_id": f"{h}{k}", "trace_source": h, "episode": h, "n_assistant_turns": 3, "subagent": k == 0}
        for k in range(2)
    ]
    return {
        "trajectory_id": f"{h}{n}",
        "task_id": h,
        "source": h,
        "task": h,
        "trace_source": h,
        "trial_name": h,
        "run_id": h,
        "episode": h,
        "n_episodes": 2,
        "agent": h,
        "model": h,
        "date": h,
        "n_messages": 8,
        "n_assistant_turns": 3,
        "n_tokens": 1234,
        "n_chars": 5678,
        "result": h,
        "reward": 0.5,
        "exception_type": h,
        "timed_out": True,
        "kept": kept,
        "rule": None if kept else h,
        "detail": h,
        "copies": {h: (h, 2), "1k": ("", 0)},
        "export_rejects": [{"name": h, "reason": h, "detail": h}],
        "related": related,
        "rollouts": [
            {
                "trajectory_id": h,
                "trial_name": h,
                "episode": h,
                "n_assistant_turns": 2,
                "reward": None,
                "exception_type": h,
                "kept": False,
                "rule": h,
            }
        ],
        "tasks": [
            {
                "source": h,
                "name": h,
                "instruction": long,
                "metadata_json": h,
                "task_binary": _task_binary(h),
                "n_files": 2,
                "derived_from": h,
            }
        ],
        "messages": messages,
        "turn_tokens": list(range(len(messages))),
        "export": {
            "template": "qwen3" if n % 2 else h,
            "system": h,
            "n_tokens": 99,
            "dataset_id": h,
            "scale": h,
            "conversations": [{"from": "human", "value": h}, {"from": "gpt", "value": h}],
        },
    }


class _Lake:
    """What the pages read of a LakeView, every text value hostile."""

    def __init__(self, h: str, lake: Path) -> None:
        self.h, self.label, self.tokenizer, self.lake = h, h, None, lake
        self.freshness, self.freshness_note = None, h
        self.files: dict[str, list[str]] = {}  # the views' files (an exported file checks they are there)
        rl = lake / "exports" / "rl"  # an RL export whose every text is hostile
        rl.mkdir(parents=True, exist_ok=True)
        counts = {"tasks_in": 3, "tasks_out": 2, "sources": {h: {"out": 2}}, "dropped": {h: 1}, "rejected": {h: 1}}
        manifest = {
            "dataset_id": h,
            "counts": counts,
            "inputs": {"tokenizer": h},
            "tables": {"tasks": {"file": h, "rows": 2}},
        }
        (rl / "manifest.json").write_text(json.dumps(manifest))
        self.datasets = [
            {
                "view": v,
                "kind": kind,
                "scale": h,
                "dataset_id": h,
                "rows": 3,
                "trajectories": 2,
                "manifest": {
                    "inputs": {"pool": h, "selection_dataset": h, "trajectories": {h: h, "b": h}},
                    "params": {"score": h, "total": 3, "template": h, "max_tokens": h},
                },
            }
            for v, kind in (
                ("pool", "pool"),
                (f"selection_{h}", "selection"),
                ("selection_1k", "selection"),
                (f"sft_{h}", "export_sft"),
            )
        ]

    def _rows(self, sql: str, params=None) -> list[dict]:
        if "median" in sql:
            return [{"turns": 3.0, "tokens": 1500.0, "max_tokens": 9}]
        return [{"source": self.h, "n": 2}, {"source": "b", "n": 1}]

    def trajectory(self, trajectory_id: str) -> dict:
        return _trajectory(self.h, 1)


@pytest.mark.parametrize("h", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_values_reach_every_page_only_as_text(h, monkeypatch, tmp_path):
    rendered: set[str] = set()
    get = ENV.get_template

    def recording(name, *args, **kwargs):
        rendered.add(name)
        return get(name, *args, **kwargs)

    monkeypatch.setattr(ENV, "get_template", recording)
    monkeypatch.setattr("tracelake.explore.diff_html.render_body", lambda report: f"<p>{html.escape(h)}</p>")

    q = Query(where=h, source=h, task=h, rule=h, dataset=h, q=h, after=h, reward_min=0.5, turns_max=3, timed_out=True)
    facets = {"source": [(h, 3), ("b", 1)], "rule": [(h, 1)], "dataset": [(h, 2)]}
    hits = [Hit(h, k, h, 1.0, f"before {h} after " * 20) for k in range(14)]
    rows = [{**_trajectory(h, k), "is_subagent": k == 1, "hits": hits} for k in range(3)]
    for query in (q, Query(where=h, source=h, task=h, rule=h, after=h)):
        _check(
            pages.list_page(
                query,
                rows,
                3,
                h,
                facets,
                label=h,
                opened=rows[0]["trajectory_id"],
                columns=[h, "x"],
                search_state="ready",
                capped=True,
            ),
            h,
        )
    _check(pages.list_page(q, [], 0, None, facets, label=h, error=h, columns=[h]), h)
    _check(pages.list_page(q, [], 0, None, facets, label=h, search_state=h), h)
    _check(pages.trace_page(_trajectory(h, 1), q, label=h), h)
    _check(pages.trace_page(_trajectory(h, 2, kept=True), q, label=h), h)
    _check(pages.compare_page(_trajectory(h, 1), _trajectory(h + "b", 2), q, label=h), h)
    _check(pages.not_found(h, label=h), h)
    lake = _Lake(h, tmp_path / "lake")
    recorded = [Recorded(kind, "exp-1", "0" * 40, h, h) for kind in ("experiment", "branch", "commit")]
    monkeypatch.setattr(datasets, "recorded_versions", lambda root: [*recorded, Recorded("tag", h, h, h, h)])
    page = datasets.datasets_page(lake)
    _check(page, h)
    assert (
        page.count('class="version"') == 3 and "<h2>Datasets of tasks</h2>" in page
    )  # a hostile rev name is not listed
    _check(datasets.diff_page(lake, h, h, {"report": h}, error=h), h)
    _check(datasets.diff_page(lake, "", "", None), h)
    _check(b"".join(download.html_file(lake, [h, h + "2"], q)).decode(), h, scripts=0)
    assert "<script" not in pages.messages_html(_trajectory(h, 1)["messages"])
    assert rendered == set(ENV.list_templates())  # every template, hostile values in all of them


def test_pages_keep_the_escaping_they_always_had():
    """html.escape's entities (&quot; &#x27;), as before the templates; None shows as nothing."""
    page = pages.not_found("a \"b\" 'c' <d> & e", label=None)
    assert "tracelake: a &quot;b&quot; &#x27;c&#x27; &lt;d&gt; &amp; e</p>" in page
    assert '<span class="lake"></span>' in page


def test_templates_ship_inside_the_package():
    """hatch packages src/tracelake whole: the templates are package files, loaded by PackageLoader."""
    from importlib import resources

    shipped = {p.name for p in (resources.files("tracelake.explore.view") / "templates").iterdir()}
    assert set(ENV.list_templates()) == shipped == {p.name for p in (VIEW / "templates").glob("*.html")}
    assert Path(ENV.get_template("base.html").filename).parent == VIEW / "templates"
