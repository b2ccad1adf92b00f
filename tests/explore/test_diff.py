"""`tracelake diff` and `tracelake sql --rev` on a real ablation: a temp git + DVC repository where a
branch raises filter.min_assistant_turns, both built by `dvc repro`, compared through DVC at their
revisions. And, on a small lake written from code, selections of one pool upsampled by two scorers:
the diff explains each selection move by the task's score on both sides."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from contextlib import ExitStack
from pathlib import Path

import duckdb
import pytest
import yaml

from tracelake.core.errors import BadInput
from tracelake.core.outputs import read_manifest
from tracelake.explore.diff import diff_versions, resolve_version

from ..helpers import chromium_page, run_ok, run_tracelake

BRANCH = "more-turns"
NEW_MIN_TURNS = 7


def git(repo: Path, *args: str) -> str:
    return run_ok(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], repo)


def ids(con_query: str, **params) -> set[str]:
    return {r[0] for r in duckdb.execute(con_query, params).fetchall()}


@pytest.fixture(scope="module")
def ablation(sample_project, tmp_path_factory):
    """main: the sample as built; more-turns: filter.min_assistant_turns raised to NEW_MIN_TURNS and
    rebuilt. Returns (repo, main's old threshold, main's pool and 1k selection copied aside)."""
    repo = tmp_path_factory.mktemp("ablation") / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "baseline")
    git(repo, "branch", "-M", "main")
    aside = repo.parent / "main-files"
    aside.mkdir()
    shutil.copy(repo / "lake/pool/pool.parquet", aside / "pool.parquet")
    shutil.copy(repo / "lake/selections/1k/selection.parquet", aside / "selection_1k.parquet")
    shutil.copy(repo / "lake/exports/sft/1k/manifest.json", aside / "sft_1k_manifest.json")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    old = params["filter"]["min_assistant_turns"]
    assert old < NEW_MIN_TURNS
    git(repo, "checkout", "-qb", BRANCH)
    params["filter"]["min_assistant_turns"] = NEW_MIN_TURNS
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_ok(["dvc", "repro"], repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"ablation: min_assistant_turns {NEW_MIN_TURNS}")
    return repo, old, aside


def expected_moved(aside: Path) -> set[str]:
    """Independently: main's pool rows under the branch's new threshold (every earlier rule is the same)."""
    return ids(
        "SELECT trajectory_id FROM read_parquet($f) WHERE n_assistant_turns < $n",
        f=str(aside / "pool.parquet"),
        n=NEW_MIN_TURNS,
    )


def test_pool_diff_reports_exactly_the_filtered_rows(ablation):
    repo, old, aside = ablation
    moved = expected_moved(aside)
    assert moved, "the scenario must move rows"
    proc = run_tracelake(repo, "diff", "main:pool", f"{BRANCH}:lake/pool", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    t = report["summary"]["trajectories"]
    assert t["removed"]["trajectories"] == len(moved)
    assert t["added"]["trajectories"] == t["changed"]["trajectories"] == t["reweighted"]["trajectories"] == 0
    assert {r["trajectory_id"] for r in report["moved"]} == moved
    assert {(r["status"], r["stage"], r["rule"]) for r in report["moved"]} == {
        ("removed", "filter", "min_assistant_turns_v1")
    }
    assert all(r["detail"].endswith(f"assistant turns < {NEW_MIN_TURNS}") for r in report["moved"])
    assert report["explained"] == [
        {
            "status": "removed",
            "stage": "filter",
            "rule": "min_assistant_turns_v1",
            "trajectories": len(moved),
            "rows_delta": -len(moved),
        }
    ]
    assert report["summary"]["rows_delta"] == -len(moved)
    assert report["params"] == [{"key": "filter.min_assistant_turns", "a": old, "b": NEW_MIN_TURNS}]
    funnel = report["funnel"]["total"]
    assert funnel["kept_b"] - funnel["kept_a"] == -len(moved)
    by_rule = {r["rule"]: r["delta"] for r in funnel["rules"]}
    assert by_rule["min_assistant_turns_v1"] >= len(moved)
    assert sum(by_rule.values()) == len(moved)
    assert all(d <= 0 for rule, d in by_rule.items() if rule != "min_assistant_turns_v1")
    assert report["a"]["commit"] == git(repo, "rev-parse", "main").strip()
    # per source: the losses add up to the moved rows of each source
    per_source = duckdb.execute(
        "SELECT source, count(*) FROM read_parquet($f) WHERE n_assistant_turns < $n GROUP BY ALL",
        {"f": str(aside / "pool.parquet"), "n": NEW_MIN_TURNS},
    ).fetchall()
    assert {r["source"]: -r["rows_delta"] for r in report["sources"] if r["rows_delta"]} == dict(per_source)
    assert report["distributions"]["turns"]["b"]["min"] >= NEW_MIN_TURNS > report["distributions"]["turns"]["a"]["min"]


def test_selection_diff_explains_each_moved_row(ablation):
    repo, _, aside = ablation
    moved = expected_moved(aside)
    selected_in_main = ids("SELECT trajectory_id FROM read_parquet($f)", f=str(aside / "selection_1k.parquet"))
    with ExitStack() as stack:
        a = resolve_version("main:1k", stack, root=repo)
        b = resolve_version(f"{BRANCH}:1k", stack, root=repo)
        report = diff_versions(a, b)
    assert (a.kind, b.kind) == ("selection", "selection")
    assert report["summary"]["rows_a"] == report["summary"]["rows_b"] == 1000
    rows = report["moved"]
    removed_by_filter = {r["trajectory_id"] for r in rows if r["status"] == "removed" and r["stage"] == "filter"}
    assert removed_by_filter == moved & selected_in_main and removed_by_filter
    assert {r["rule"] for r in rows if r["stage"] == "filter"} == {"min_assistant_turns_v1"}
    # whatever else moved was the selection making up the fixed-size scale from what remained
    assert {(r["status"], r["stage"]) for r in rows if r["stage"] != "filter"} <= {
        ("removed", "selection"),
        ("added", "selection"),
        ("reweighted", "selection"),
    }
    assert not any(r["status"] == "added" and r["trajectory_id"] in moved for r in rows)
    # both sides upsampled by the same scorer: a selection move says the task's score on each side
    assert all(re.fullmatch(r"score \S+ -> \S+", r["detail"]) for r in rows if r["stage"] == "selection")
    scorers = report["summary"]["scorers"]
    assert scorers["a"] == scorers["b"] == a.lineage["selection"]["params"]["score"] and not scorers["changed"]
    # the rows removed, rows gained and rows kept add up on both sides
    t = report["summary"]["trajectories"]
    assert sum(v["rows_a"] for v in t.values()) == 1000 == sum(v["rows_b"] for v in t.values())
    assert report["params"] == [{"key": "filter.min_assistant_turns", "a": 5, "b": NEW_MIN_TURNS}]


def test_export_diff_by_id_prefix_and_scale_name(ablation):
    repo, _, aside = ablation
    moved = expected_moved(aside)
    main_id = json.loads((aside / "sft_1k_manifest.json").read_text())["dataset_id"]
    branch_id = read_manifest(repo / "lake/exports/sft/1k")["dataset_id"]
    assert main_id != branch_id
    digest = main_id.rpartition("-")[2]
    with ExitStack() as stack:
        a = resolve_version(f"main:{digest[:6]}", stack, root=repo)  # a 6-hex prefix at a revision
        b = resolve_version(branch_id[:-4], stack, root=repo)  # an id prefix in the work tree
        c = resolve_version(f"{BRANCH}:sft-1k", stack, root=repo)  # export by scale at a branch
        assert (a.dataset_id, b.dataset_id, c.dataset_id) == (main_id, branch_id, branch_id)
        report = diff_versions(a, b)
    removed = {r["trajectory_id"] for r in report["moved"] if r["status"] == "removed" and r["stage"] == "filter"}
    assert removed and removed <= moved
    assert {r["rule"] for r in report["moved"] if r["stage"] == "filter"} == {"min_assistant_turns_v1"}
    assert report["a"]["kind"] == report["b"]["kind"] == "export_sft"


def test_diff_of_a_version_with_itself_is_empty(ablation):
    repo, _, _ = ablation
    proc = run_tracelake(repo, "diff", "1k", f"{BRANCH}:lake/selections/1k", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["identical"] and report["moved"] == [] and report["explained"] == [] and report["params"] == []
    assert report["summary"]["trajectories"]["unchanged"]["rows_a"] == 1000


def test_selection_against_its_own_export(ablation):
    """Different kinds compare by trajectory id and copies: a selection and its export (nothing
    rejected) have the same rows, so nothing moved, and the note says how they were compared."""
    repo, _, _ = ablation
    assert read_manifest(repo / "lake/exports/sft/1k")["counts"]["rejected"] == {}
    with ExitStack() as stack:
        report = diff_versions(resolve_version("1k", stack, root=repo), resolve_version("sft-1k", stack, root=repo))
    assert report["moved"] == [] and report["summary"]["trajectories"]["unchanged"]["rows_b"] == 1000
    assert any("selection with export_sft" in n for n in report["notes"])


def test_terminal_summary_names_the_filter(ablation):
    repo, _, aside = ablation
    proc = run_tracelake(repo, "diff", "main:pool", "pool")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "min_assistant_turns_v1" in out and "filter.min_assistant_turns" in out
    assert f"removed {len(expected_moved(aside)):,}" in out and "Why rows moved" in out


def test_dvc_experiment_names_are_revisions(ablation, tmp_path):
    """`dvc exp run -n NAME` keeps its result under refs/exps/…: NAME: reads it through DVC."""
    repo, _, aside = ablation
    work = tmp_path / "repo"
    shutil.copytree(repo, work, symlinks=True)
    git(work, "checkout", "-q", "main")
    run_ok(["dvc", "checkout", "-q"], work)
    run_ok(["dvc", "exp", "run", "-q", "-n", "six-turns", "-S", "filter.min_assistant_turns=6"], work)
    git(work, "checkout", "-q", "--", ".")
    run_ok(["dvc", "checkout", "-q", "--force"], work)
    proc = run_tracelake(work, "diff", "main:pool", "six-turns:pool", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    moved = ids("SELECT trajectory_id FROM read_parquet($f) WHERE n_assistant_turns < 6", f=str(aside / "pool.parquet"))
    assert {r["trajectory_id"] for r in report["moved"]} == moved
    assert report["params"] == [{"key": "filter.min_assistant_turns", "a": 5, "b": 6}]
    refs = git(work, "for-each-ref", "--format=%(refname)", "refs/exps").split()
    exp_ref = [r for r in refs if r.endswith("/six-turns")]
    assert len(exp_ref) == 1 and report["b"]["commit"] == git(work, "rev-parse", exp_ref[0]).strip()
    # the viewer's datasets page lists the experiment (and the branches), each with its diffs
    from tracelake.core.revisions import recorded_versions
    from tracelake.explore.view.datasets import datasets_page
    from tracelake.explore.view.db import LakeView

    found = {(r.kind, r.name) for r in recorded_versions(work)}
    assert {("experiment", "six-turns"), ("branch", "main"), ("branch", BRANCH)} <= found
    here = Path.cwd()
    os.chdir(work)
    try:
        page = datasets_page(LakeView(work / "lake"))
    finally:
        os.chdir(here)
    assert '<tr class="version" data-kind="experiment"><td>experiment</td><td><code>six-turns</code>' in page
    assert 'href="/diff?a=six-turns%3A1k&amp;b=1k"' in page
    assert "<h2>Datasets of tasks</h2>" in page
    # and `tracelake train` takes the experiment's dataset, as diff does (it refused `six-turns:1k`)
    trained = run_tracelake(work, "train", "sft", "--dataset", "six-turns:1k", "--dry-run")
    assert trained.returncode == 0, trained.stderr
    exp_export = report_of(work, "six-turns:sft-1k", "sft-1k")["a"]["dataset_id"]
    assert f"dataset:  {exp_export} (" in trained.stdout and "revision: six-turns (" in trained.stdout
    assert exp_export != read_manifest(work / "lake/exports/sft/1k")["dataset_id"]  # not the workspace's


def report_of(repo: Path, a: str, b: str) -> dict:
    proc = run_tracelake(repo, "diff", a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def cache_digest(repo: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((repo / ".dvc" / "cache").rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(repo)).encode() + p.read_bytes())
    return h.hexdigest()


def test_sql_rev_reads_the_older_version(ablation):
    repo, _, aside = ablation
    main_rows = duckdb.execute("SELECT count(*) FROM read_parquet($f)", {"f": str(aside / "pool.parquet")}).fetchone()[
        0
    ]
    now = run_tracelake(repo, "sql", "SELECT count(*) AS n FROM pool", "--format", "csv")
    before = run_tracelake(repo, "sql", "--rev", "HEAD~1", "SELECT count(*) AS n FROM pool", "--format", "csv")
    assert now.returncode == before.returncode == 0, now.stderr + before.stderr
    assert before.stdout.splitlines()[1] == str(main_rows)
    assert now.stdout.splitlines()[1] == str(main_rows - len(expected_moved(aside)))
    assert "HEAD~1" in before.stderr
    # datasets at that revision are there under their ids too
    main_sel = git(repo, "show", "main:dvc.lock")
    assert "selections/1k" in main_sel
    by_branch = run_tracelake(
        repo, "sql", "--rev", "main", "SELECT min(n_assistant_turns) AS m FROM pool", "--format", "csv"
    )
    assert int(by_branch.stdout.splitlines()[1]) < NEW_MIN_TURNS


def test_sql_rev_is_read_only_and_leaves_the_cache_alone(ablation):
    repo, _, _ = ablation
    before = cache_digest(repo)
    for statement in ("COPY pool TO 'evil.parquet'", "CREATE TABLE t AS SELECT 1", "SELECT 1; DROP VIEW pool"):
        proc = run_tracelake(repo, "sql", "--rev", "HEAD~1", statement)
        assert proc.returncode == 2 and "read-only" in proc.stderr, proc.stderr
    assert cache_digest(repo) == before
    assert not (repo / "evil.parquet").exists()
    assert git(repo, "status", "--porcelain") == ""


def test_revision_missing_from_the_cache_says_how_to_fetch_it(ablation, tmp_path):
    repo, _, _ = ablation
    work = tmp_path / "repo"
    shutil.copytree(repo, work, symlinks=True)
    shutil.rmtree(work / ".dvc" / "cache")
    proc = run_tracelake(work, "sql", "--rev", "main", "SELECT count(*) FROM pool")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "dvc fetch" in proc.stderr and "main" in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["sql", "--rev", "no-such-branch", "SELECT 1"], "unknown revision 'no-such-branch'"),
        (["diff", "no-such-branch:1k", "1k"], "unknown revision 'no-such-branch'"),
        (["diff", "main:99k", "1k"], "no dataset '99k'"),
        (["diff", "abcdef", "1k"], "no dataset 'abcdef'"),
        (["diff", "main:", "1k"], "expected REV:PATH"),
        (["diff", "main:lake/tasks/nl2bash", "1k"], "diff compares versions of pool, selection, export_sft"),
    ],
)
def test_bad_versions_are_one_line_errors(ablation, args, message):
    repo, _, _ = ablation
    proc = run_tracelake(repo, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("tracelake: ") and message in proc.stderr and proc.stderr.count("\n") == 1, (
        proc.stderr
    )


def test_ids_resolve_by_unique_prefix_only(sample_project, tmp_path):
    """Two datasets whose ids share 6 hex digits: the shared prefix is refused, a longer one resolves."""
    lake = tmp_path / "lake"
    shutil.copytree(sample_project / "lake" / "pool", lake / "pool")
    for name, digest in (("x", "abcdef111111"), ("y", "abcdef222222")):
        d = lake / "selections" / name
        shutil.copytree(sample_project / "lake" / "selections" / "1k", d)
        m = json.loads((d / "manifest.json").read_text())
        m["dataset_id"] = f"sel-1k-{digest}"
        (d / "manifest.json").write_text(json.dumps(m))
    with ExitStack() as stack:
        with pytest.raises(BadInput, match="'abcdef' is ambiguous: sel-1k-abcdef111111, sel-1k-abcdef222222"):
            resolve_version("abcdef", stack, root=tmp_path)
        with pytest.raises(BadInput, match="no dataset 'abcde'"):
            resolve_version("abcde", stack, root=tmp_path)  # under 6 digits: not a prefix
        assert resolve_version("abcdef2", stack, root=tmp_path).directory == lake / "selections" / "y"
        assert resolve_version("sel-1k-abcdef1", stack, root=tmp_path).directory == lake / "selections" / "x"
        assert resolve_version("x", stack, root=tmp_path).directory == lake / "selections" / "x"


def test_an_export_outside_a_lakes_layout_says_its_moves_are_explained_in_part(sample_project, tmp_path):
    """An SFT export copied out of its lake has no selection or pool beside it to explain its moves:
    diff says so, and still compares it."""
    copy = tmp_path / "somewhere" / "1k"
    shutil.copytree(sample_project / "lake" / "exports" / "sft" / "1k", copy, symlinks=True)
    with ExitStack() as stack:
        v = resolve_version(str(copy), stack, root=tmp_path)
        assert v.pool is None and v.scored is None and list(v.lineage) == ["export_sft"]
        assert v.notes == [f"{copy}: not in a lake (no selection beside it): moves are explained only in part"]
        same = diff_versions(v, resolve_version(str(copy), stack, root=tmp_path))
    assert same["identical"] and same["summary"]["trajectories"]["unchanged"]["rows_a"] == 1000


def test_html_report_renders_in_headless_chromium(ablation, tmp_path):
    """The --html page in a real browser (Debian's Chromium through Playwright): it loads with no console
    message and no failed request, every chart is drawn with visible bars, and the same diff gives the
    same bytes. The screenshot is kept in $TRACELAKE_SCREENSHOTS when that is set."""
    repo, _, _ = ablation
    html = tmp_path / "report.html"
    proc = run_tracelake(repo, "diff", "main:1k", f"{BRANCH}:1k", "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    page_text = html.read_text()
    again = tmp_path / "again.html"
    assert run_tracelake(repo, "diff", "main:1k", f"{BRANCH}:1k", "--html", str(again)).returncode == 0
    assert again.read_bytes() == html.read_bytes()
    # self-contained: nothing to fetch, no script
    assert "<script" not in page_text and "<link" not in page_text and "src=" not in page_text
    assert "https://" not in page_text and "http://" not in page_text.replace('xmlns="http://www.w3.org/2000/svg"', "")

    with chromium_page(1200) as (page, messages, failures, dialogs):
        page.goto(html.as_uri(), wait_until="load")
        assert page.title().startswith("tracelake diff sel-1k-")
        charts = page.locator("svg.chart")
        labels = [charts.nth(i).get_attribute("aria-label") for i in range(charts.count())]
        assert labels == [
            "Rows gained (+) and lost (−) in B, by explanation",
            "Rows dropped per filter rule",
            "Rows per source",
            "Turns per row (share of each side's rows)",
            "Tokens per row (share of each side's rows)",
        ]
        for i in range(charts.count()):
            box = charts.nth(i).bounding_box()
            assert box and box["width"] > 300 and box["height"] > 60, (labels[i], box)
            bars = charts.nth(i).locator("rect.bar")
            heights = [bars.nth(j).bounding_box()["height"] for j in range(bars.count())]
            widths = [bars.nth(j).bounding_box()["width"] for j in range(bars.count())]
            assert bars.count() > 0 and max(heights) > 10 and max(widths) > 10, labels[i]
        assert page.locator("svg.chart polyline.line").count() == 2  # B's line on both histograms
        assert "min_assistant_turns_v1" in page.inner_text("body")
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 20_000
    assert messages == [] and failures == [] and dialogs == []
    keep = os.environ.get("TRACELAKE_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "diff-report.png")


# --- selections upsampled by different scorers (a small lake written from code: no pipeline) ------

SCORER_X, SCORER_Y = "response_length_proxy_v1", "llm_response_length_v1"
# task -> (source, rollouts, score under X, score under Y); Y has no score for t4 (select.unscored: drop)
SCORE_TASKS = {
    "t0": ("alpha", 3, 812.5, 95.0),
    "t1": ("alpha", 2, 100.0, 300.25),
    "t2": ("beta", 2, 40.0, 40.0),
    "t3": ("beta", 1, 0.0, 7.0),
    "t4": ("beta", 2, 10.0, None),
}
SCORE_N = 16


def fmt_score(x: float | None) -> str:
    """How the diff writes a score: at most 4 decimals, no trailing `.0`; `none` for no score."""
    return "none" if x is None else (str(int(x)) if x == int(x) else str(round(x, 4)))


def write_pool(lake: Path) -> list[dict]:
    from tracelake.core.outputs import output_dir, write_manifest
    from tracelake.core.schema import load_schema
    from tracelake.core.tables import TableWriter

    rows = [
        {
            "trajectory_id": f"{tid}-r{i}",
            "task_id": tid,
            "source": source,
            "task": f"task_{tid}",
            "trace_source": "harbor",
            "episode": None,
            "n_messages": 4 + i,
            "n_assistant_turns": 2 + i,
            "n_chars": 100 * (i + 1),
            "n_tokens": 50 * (i + 1),
            "reward": 1.0,
            "conversation_sha256": hashlib.sha256(f"{tid}-{i}".encode()).hexdigest(),
        }
        for tid, (source, k, _, _) in SCORE_TASKS.items()
        for i in range(k)
    ]
    with output_dir(lake / "pool") as tmp:
        writer = TableWriter(tmp, load_schema("pool"))
        for r in rows:
            writer.write(r)
        write_manifest(
            tmp,
            kind="pool",
            tables=[writer.close()],
            inputs={},
            params={"min_assistant_turns": 1},
            formulas={},
            counts={},
        )
    return rows


def write_selection(
    lake: Path, scale: str, scorer: str, scores: dict[str, float], n: int, unscored: str = "zero"
) -> list[dict]:
    """As stages/select_scale.py writes it, through the real select()."""
    from tracelake.core.datasets import dataset_id
    from tracelake.core.outputs import output_dir, read_manifest, write_manifest
    from tracelake.core.schema import load_schema
    from tracelake.core.tables import TableWriter
    from tracelake.curate.params import MixParams
    from tracelake.curate.select import group_pool, select

    pool = duckdb.execute(
        "SELECT trajectory_id, task_id, source, task FROM read_parquet($f)", {"f": str(lake / "pool" / "pool.parquet")}
    ).fetchall()
    pool_rows = [dict(zip(("trajectory_id", "task_id", "source", "task"), r)) for r in pool]
    selection = select(group_pool(pool_rows), scores, MixParams(), n, unscored)
    with output_dir(lake / "selections" / scale) as tmp:
        writer = TableWriter(tmp, load_schema("selection"))
        for r in selection.rows:
            writer.write(r)
        info = writer.close()
        name = dataset_id("sel", n, info.version_id)
        write_manifest(
            tmp,
            kind="selection",
            tables=[info],
            dataset_id=name,
            inputs={"pool": read_manifest(lake / "pool")["version_id"]},
            params={"scale": scale, "rows": n, "score": scorer, "unscored": unscored, "mix": {}},
            formulas={},
            counts={"dataset_id": name, **selection.counts},
        )
    return selection.rows


def write_export(lake: Path, scale: str) -> None:
    """A minimal SFT export of a selection: one example per slot, nothing rejected."""
    from tracelake.core.datasets import dataset_id
    from tracelake.core.outputs import output_dir, read_manifest, write_manifest
    from tracelake.core.schema import load_schema
    from tracelake.core.tables import ShardWriter

    sel = lake / "selections" / scale
    manifest = read_manifest(sel)
    slots = duckdb.execute(
        "SELECT * FROM read_parquet($f) ORDER BY slot_id", {"f": str(sel / "selection.parquet")}
    ).fetchall()
    names = [
        d[0]
        for d in duckdb.execute(
            "DESCRIBE SELECT * FROM read_parquet($f)", {"f": str(sel / "selection.parquet")}
        ).fetchall()
    ]
    with output_dir(lake / "exports" / "sft" / scale) as tmp:
        with ShardWriter(tmp / "shards", load_schema("sft_rows"), 1000) as shards:
            for slot in (dict(zip(names, r)) for r in slots):
                shards.write(
                    {
                        "id": f"{slot['source']}/{slot['name']}",
                        "system": "",
                        "conversations": [
                            {"from": "human", "value": slot["task"]},
                            {"from": "gpt", "value": slot["trajectory_id"]},
                        ],
                        "slot_id": slot["slot_id"],
                        "trajectory_id": slot["trajectory_id"],
                        "task_id": slot["task_id"],
                        "source": slot["source"],
                        "task": slot["task"],
                        "copy": slot["copy"],
                        "n_tokens": 10,
                    }
                )
            info = shards.close()
        name = dataset_id("sft", manifest["params"]["rows"], info.version_id)
        (tmp / "shards").rename(tmp / name)
        write_manifest(
            tmp,
            kind="export_sft",
            dataset_id=name,
            tables=[info.with_file(f"{name}/")],
            inputs={"selection": manifest["version_id"], "selection_dataset": manifest["dataset_id"]},
            params={"scale": scale},
            formulas={},
            counts={"dataset_id": name, "files": [f"{name}/{f}" for f in shards.files]},
        )


@pytest.fixture(scope="module")
def scored_lake(tmp_path_factory):
    """<root>/lake: one pool; selection x upsampled by SCORER_X, y by SCORER_Y (unscored tasks dropped),
    z by SCORER_X at another size; SFT exports of x and y. Returns (root, {scale: selection rows})."""
    root = tmp_path_factory.mktemp("scored")
    lake = root / "lake"
    write_pool(lake)
    x = {t: v[2] for t, v in SCORE_TASKS.items()}
    y = {t: v[3] for t, v in SCORE_TASKS.items() if v[3] is not None}
    rows = {
        "x": write_selection(lake, "x", SCORER_X, x, SCORE_N),
        "y": write_selection(lake, "y", SCORER_Y, y, SCORE_N, unscored="drop"),
        "z": write_selection(lake, "z", SCORER_X, x, SCORE_N + 6),
    }
    write_export(lake, "x")
    write_export(lake, "y")
    return root, rows


def copies(rows: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r["trajectory_id"]] = out.get(r["trajectory_id"], 0) + 1
    return out


def score_diff(root: Path, a: str, b: str) -> dict:
    with ExitStack() as stack:
        return diff_versions(resolve_version(a, stack, root=root), resolve_version(b, stack, root=root))


def expected_score_moves(rows_a: list[dict], rows_b: list[dict]) -> tuple[set[str], set[str]]:
    """Independently, from the two selections: (trajectories whose copies differ, those that kept them)."""
    ca, cb = copies(rows_a), copies(rows_b)
    every = set(ca) | set(cb)
    moved = {t for t in every if ca.get(t, 0) != cb.get(t, 0)}
    return moved, every - moved


@pytest.mark.parametrize("a, b", [("x", "y"), ("sft-x", "sft-y")])
def test_selection_moves_are_explained_by_both_scores(scored_lake, a, b):
    """Two selections of one pool by different scorers (and their SFT exports, whose selections are
    found through lineage): every moved row says its task's score on each side with both scorers."""
    root, rows = scored_lake
    moved, kept = expected_score_moves(rows["x"], rows["y"])
    assert moved and kept, "the scenario must move some rows and keep others"
    report = score_diff(root, a, b)
    assert report["a"]["kind"] == report["b"]["kind"]
    assert {r["trajectory_id"] for r in report["moved"]} == moved
    assert report["summary"]["trajectories"]["unchanged"]["trajectories"] == len(kept)
    assert not kept & {r["trajectory_id"] for r in report["moved"]}
    for r in report["moved"]:
        _, _, sx, sy = SCORE_TASKS[r["task_id"]]
        assert r["stage"] == "selection" and r["rule"] in ("copies", "not_selected", "selected"), r
        assert r["detail"] == f"score {SCORER_X} {fmt_score(sx)} -> {SCORER_Y} {fmt_score(sy)}", r
    details = {r["task_id"]: r["detail"] for r in report["moved"]}
    assert details["t0"] == f"score {SCORER_X} 812.5 -> {SCORER_Y} 95"
    assert details["t4"] == f"score {SCORER_X} 10 -> {SCORER_Y} none"  # not in y's selection at all
    assert {r["rule"] for r in report["moved"] if r["task_id"] == "t4"} == {"not_selected"}
    assert report["summary"]["scorers"] == {"a": SCORER_X, "b": SCORER_Y, "changed": True}
    assert {"key": "select.score", "a": SCORER_X, "b": SCORER_Y} in report["params"]


def test_same_scorer_moves_show_the_scores_only(scored_lake):
    root, rows = scored_lake
    moved, kept = expected_score_moves(rows["x"], rows["z"])
    report = score_diff(root, "x", "z")
    assert {r["trajectory_id"] for r in report["moved"]} == moved and kept
    for r in report["moved"]:
        sx = fmt_score(SCORE_TASKS[r["task_id"]][2])
        assert (r["stage"], r["detail"]) == ("selection", f"score {sx} -> {sx}"), r
    assert report["summary"]["scorers"] == {"a": SCORER_X, "b": SCORER_X, "changed": False}


def test_score_detail_needs_both_selections(scored_lake):
    """A pool has no selection: moves against it keep the plain explanation, with no detail."""
    root, rows = scored_lake
    report = score_diff(root, "pool", "y")
    assert report["moved"] and all(r["detail"] is None for r in report["moved"])
    assert {(r["stage"], r["rule"]) for r in report["moved"]} <= {
        ("selection", "not_selected"),
        ("selection", "copies"),
    }
    assert report["summary"]["scorers"] == {"a": None, "b": SCORER_Y, "changed": False}


def test_scorer_change_in_text_and_html(scored_lake):
    from tracelake.explore.diff_html import render_html

    root, _ = scored_lake
    proc = run_tracelake(root, "diff", "x", "y", columns=250)
    assert proc.returncode == 0, proc.stderr
    assert f"Scorers  A {SCORER_X} → B {SCORER_Y}" in proc.stdout
    assert f"selection copies: score {SCORER_X} 812.5 -> {SCORER_Y} 95" in proc.stdout
    html = render_html(score_diff(root, "x", "y"))
    assert f"<b>Scorers</b> A {SCORER_X} → B {SCORER_Y}" in html
    assert f"score {SCORER_X} 812.5 -&gt; {SCORER_Y} 95" in html
    same = run_tracelake(root, "diff", "x", "z", columns=250)
    assert same.returncode == 0 and "Scorers" not in same.stdout, same.stderr


def test_rl_export_diff_explains_each_task_by_its_curation_rule(sample_project, tmp_path):
    """RL exports compare task by task: with filter.near_duplicates off, the tasks main's RL export
    dropped as near-duplicates come back, each explained by main's rule and detail; an RL export
    does not compare with an SFT one."""
    repo = tmp_path / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "baseline")
    git(repo, "branch", "-M", "main")
    main_dropped = dict(
        duckdb.execute(
            "SELECT task_id, detail FROM read_parquet($f) WHERE rule = 'near_duplicate_v1'",
            {"f": str(repo / "lake/exports/rl/rl_dropped.parquet")},
        ).fetchall()
    )
    assert main_dropped
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["filter"]["near_duplicates"] = False
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_ok(["dvc", "repro", "export_rl"], repo)
    proc = run_tracelake(repo, "diff", "main:rl", "rl", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["a"]["kind"] == report["b"]["kind"] == "export_rl"
    added = {r["trajectory_id"]: r for r in report["moved"] if r["status"] == "added"}
    assert set(added) == set(main_dropped)
    assert all(r["stage"] == "filter" and r["rule"] == "near_duplicate_v1" for r in added.values())
    assert all(added[t]["detail"] == d for t, d in main_dropped.items())
    assert not [r for r in report["moved"] if r["status"] != "added"]
    assert {"key": "filter.near_duplicates", "a": True, "b": False} in report["params"]  # its params.yaml name
    # a pick of 20 tasks: every other task of main's export is removed by the selection, with its rank
    params["filter"]["near_duplicates"] = True
    params["export_rl"]["pick"]["tasks"] = 20
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_ok(["dvc", "repro", "export_rl"], repo)
    report = json.loads(run_tracelake(repo, "diff", "main:rl", "rl", "--json").stdout)
    removed = [r for r in report["moved"] if r["status"] == "removed"]
    assert len(removed) == read_manifest(repo / "lake/exports/rl")["counts"]["picked"]["from"] - 20
    assert not [r for r in report["moved"] if r["status"] != "removed"]
    assert all(r["stage"] == "selection" and r["rule"] == "rl_pick_v1" for r in removed)
    assert all(
        re.fullmatch(r"rank \d+ of \d+ \(uniform, seed 0\): not among the 20 picked", r["detail"]) for r in removed
    )
    mixed = run_tracelake(repo, "diff", "rl", "sft-1k")
    assert mixed.returncode != 0 and "a dataset of tasks compares only with another dataset of tasks" in mixed.stderr
