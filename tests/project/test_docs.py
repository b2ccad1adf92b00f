"""The documentation: every relative link in the README, docs/ and the top-level pages points at a
file that exists (and, for `#anchor` links into Markdown, at a heading that exists, slugged as
GitHub does), and the README stays a landing page of at most 150 lines."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from ..helpers import ROOT

README_MAX_LINES = 150


def pages() -> list[Path]:
    top = [ROOT / name for name in ("README.md", "ARCHITECTURE.md", "RELIABILITY.md", "BENCHMARKS.md")]
    return [*top, *sorted((ROOT / "docs").rglob("*.md"))]


_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) and ![alt](target); text may hold brackets one level deep, as in "[`a[b]`](x)"
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")


def prose_lines(text: str, blank_code: bool = True) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked out (unless not
    blank_code)."""
    out, fenced = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and (fenced is None or m.group(1) == fenced):
            fenced = m.group(1) if fenced is None else None
            continue
        if fenced is None:
            out.append(_CODE_SPAN.sub(lambda s: " " * len(s.group(0)), line) if blank_code else line)
    return out


def links(text: str) -> list[str]:
    found = []
    for line in prose_lines(text):
        found += _INLINE.findall(line)
        m = _REFERENCE.match(line)
        if m:
            found.append(m.group(1))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text without markup, lowercased, every character but
    letters, digits, '_', '-' and spaces removed, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file's headings, duplicates numbered as GitHub does (-1, -2, …)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(), blank_code=False):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_matches_github():
    assert slug("What the model trains on: LLaMA-Factory's modes") == "what-the-model-trains-on-llama-factorys-modes"
    assert (
        slug("`tracelake view`, 100,000 trajectories, 2026-11-25, same machine")
        == "tracelake-view-100000-trajectories-2026-11-25-same-machine"
    )
    assert (
        slug("Near-duplicate clusters share one quota (`cluster_quota_v1`)")
        == "near-duplicate-clusters-share-one-quota-cluster_quota_v1"
    )
    assert slug("Older versions: `--rev`") == "older-versions---rev"
    assert slug("An empty `dvc.lock` or `rwlock`") == "an-empty-dvclock-or-rwlock"


def test_links_skip_code():
    text = "a [x](one.md) `[y](two.md)`\n```\n[z](three.md)\n```\n![img](img/a.png) [r]: ref.md\n[r]: four.md\n"
    assert links(text) == ["one.md", "img/a.png", "four.md"]


def test_the_pages_exist():
    for name in ("README.md", "ARCHITECTURE.md", "RELIABILITY.md", "BENCHMARKS.md", "docs/README.md"):
        assert (ROOT / name).is_file(), name


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path):
    broken = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:, …
            continue
        path_part, _, anchor = target.partition("#")
        dest = page if not path_part else (page.parent / unquote(path_part)).resolve()
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if ROOT.resolve() not in [dest, *dest.parents]:
            broken.append(f"{target}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT.resolve())}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_a_landing_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_every_docs_page_is_in_the_table_of_contents():
    index = (ROOT / "docs" / "README.md").read_text()
    listed = {(ROOT / "docs" / t.partition("#")[0]).resolve() for t in links(index) if not t.startswith("#")}
    missing = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "docs").rglob("*.md")
        if p.name != "README.md" and p.resolve() not in listed
    ]
    assert not missing, f"docs/README.md does not link {missing}"


# a repository path as ARCHITECTURE.md writes it: `core/lake.py`, `stages/__main__.py`, `sql/filter_rules/`
_PATH = re.compile(r"`((?:[A-Za-z0-9_.-]+/)+(?:[A-Za-z0-9_.-]+\.(?:py|md|yaml|sql|sh|txt)|))`")


def test_architecture_names_only_paths_that_exist():
    """Every path ARCHITECTURE.md names in backticks is in the tree: at the repository root or under
    src/tracelake (`core/lake.py`); generated ones (.tracelake/, lake/) and patterns (<stage>) aside."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = {m for m in _PATH.findall(text) if not m.startswith((".tracelake/", "lake/", "<"))}
    assert len(named) > 30, sorted(named)  # the pattern reads the page
    missing = [p for p in sorted(named) if not ((ROOT / p).exists() or (ROOT / "src" / "tracelake" / p).exists())]
    assert not missing, f"ARCHITECTURE.md names paths that are not in the tree: {missing}"
    tree = text[text.index("```\n") : text.index("```", text.index("```\n") + 4)]
    parent = ROOT  # the tree block: top-level entries, `  core/` under src/tracelake, deeper under those
    for line in tree.splitlines()[1:]:
        indent = len(line) - len(line.lstrip())
        for entry in line[:28].split():
            if not entry.endswith(("/", ".py", ".yaml")):
                continue
            entry = entry.replace("<stage>", "filter").replace("<table>", "pool")
            base = ROOT if indent == 0 else ROOT / "src" / "tracelake" if indent == 2 else parent
            assert (base / entry).exists(), f"ARCHITECTURE.md's tree names {entry} under {base.relative_to(ROOT)}"
            if indent == 2:
                parent = base / entry
