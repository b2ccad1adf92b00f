"""The dataset kinds (core/datasets.py): each declared once, with what every reader needs of it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tracelake.core import assets
from tracelake.core.datasets import DOCS, ID_PREFIXES, KINDS, dataset_id, dataset_kind, trained_kind, versions
from tracelake.core.errors import BadInput, Bug
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest

from ..helpers import ROOT, run_stage, run_tracelake, view_page, written_doc_table


def test_the_docs_table_is_written_from_the_declarations():
    text = (ROOT / DOCS.doc).read_text()
    assert DOCS.written_into(text) == text, f"{DOCS.doc}'s table of kinds is not KINDS': uv run {DOCS.begin[5:-4]}"
    for k in KINDS:
        assert f"| `{k.name}` |" in text


def test_each_kind_names_what_diff_reads_and_its_parent_is_a_kind():
    names = [k.name for k in KINDS]
    assert len(set(names)) == len(names) and len(set(ID_PREFIXES)) == len(ID_PREFIXES)
    for k in KINDS:
        assert assets.sql(k.diff_rows).strip(), k.name
        assert not k.parent or (k.parent in names and k.parent_input), k.name
        assert not k.task_scores or assets.sql(k.task_scores).strip(), k.name
        assert k.table not in k.also


def test_a_kind_finds_its_lake_and_scale_from_its_directory(tmp_path):
    lake = Lake(tmp_path / "lake")
    for k in KINDS:
        scale = "3k" if k.per_scale else ""
        assert k.lake_of(k.home(lake, scale)) == (lake, scale)
        assert k.lake_of(tmp_path / "elsewhere" / "3k") is None


def test_an_unknown_kind_is_an_error_never_another_kinds_answer(tmp_path):
    with pytest.raises(Bug, match="no dataset kind 'export_trl'"):
        dataset_kind("export_trl")
    with pytest.raises(ValueError, match="not one of"):
        dataset_id("trl", 10, "0" * 12)
    assert trained_kind("sft").name == "export_sft" and trained_kind("rl").name == "export_rl"
    with pytest.raises(Bug, match="no dataset kind is trained by 'dpo'"):
        trained_kind("dpo")
    assert versions(Lake(tmp_path)) == {}


NEW_KIND = """    DatasetKind(
        "export_jsonl",
        "export_jsonl",
        "jsonl",
        lambda lake: lake.root / "exports" / "jsonl",
        view="jsonl_{scale}",
        diff_name="jsonl-{scale}",
        table="jsonl_rows",
        built_from="selection_dataset",
        diff_rows="diff/rows_export_jsonl",
        parent="selection",
        parent_input="selection",
        content_stage="export",
    ),
)
ID_PREFIXES ="""

NEW_STAGE = '''"""Stage `export_jsonl@<scale>`: the scale's selection as JSON lines of messages (rows.jsonl)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import orjson

from tracelake.core.datasets import dataset_id
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.schema import load_schema
from tracelake.core.stage import Context, Manifest, Result, Stage, Streamed
from tracelake.core.tables import TableWriter


def run(ctx: Context) -> Result:
    lake, scale = Lake(ctx.params.lake), ctx.key
    selection = read_manifest(lake.selection(scale))
    traces = [str(f) for f in sorted((lake.root / "trajectories").glob("*/trajectories/*.parquet"))]
    rows = duckdb.execute(
        "SELECT s.trajectory_id, s.task_id, s.source, s.task, s.copy, t.n_assistant_turns, t.messages "
        "FROM read_parquet($sel) s JOIN read_parquet($traces) t USING (trajectory_id) ORDER BY s.slot_id",
        {"sel": str(lake.selection(scale) / "selection.parquet"), "traces": traces},
    ).to_arrow_table()

    def write(tmp: Path) -> Manifest:
        lines = (orjson.dumps({"messages": m}) + b"\\n" for m in rows["messages"].to_pylist())
        (tmp / "rows.jsonl").write_bytes(b"".join(lines))
        writer = TableWriter(tmp, load_schema("jsonl_rows"))
        writer.write_batch(rows)
        info = writer.close()
        name = dataset_id("jsonl", selection["counts"]["rows"], info.version_id)
        inputs = {"selection": selection["version_id"], "selection_dataset": selection["dataset_id"]}
        counts = {"dataset_id": name, "rows_in": rows.num_rows, "rows_out": rows.num_rows, "shards": 1}
        return Manifest("export_jsonl", [info], inputs, {"scale": scale}, {}, counts, dataset_id=name)

    return Result([Streamed(lake.root / "exports" / "jsonl" / scale, write)], metrics=lambda m: m[0]["counts"])


STAGE = Stage(
    "export_jsonl",
    __doc__,
    run,
    foreach="scales",
    params=("scales.${key}", "lake"),
    deps=("${lake}/selections/${key}", "${lake}/trajectories"),
    outs=("${lake}/exports/jsonl/${key}",),
    metrics="metrics/export_jsonl/${key}.json",
)
'''

NEW_SCHEMA = """table: jsonl_rows
version: 1
key: trajectory_id
columns:
  - {name: trajectory_id, type: string}
  - {name: task_id, type: string}
  - {name: source, type: string}
  - {name: task, type: string}
  - {name: copy, type: int32}
  - {name: n_assistant_turns, type: int32}
  - {name: messages, type: "list<struct<role: string, content: string>>"}
"""

NEW_DIFF_ROWS = """SELECT trajectory_id, task_id, source, task, n_assistant_turns AS n_turns,
       CAST(NULL AS BIGINT) AS n_tokens, hash(messages) AS content
FROM read_parquet($files)
"""


@pytest.mark.e2e
def test_a_new_dataset_kind_is_its_stage_and_one_declaration(sample_project, tmp_path):
    """A minimal JSONL export in a scratch copy of the built sample: its stage (in stages/ and
    NAMES), its rows' schema, its diff query and its DatasetKind are the only edits; dvc.yaml is
    written from the declarations; status, sql, diff, the viewer, the report and the docs' table of
    kinds show it."""
    repo = tmp_path / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    kinds_py = repo / "src" / "tracelake" / "core" / "datasets.py"
    code = kinds_py.read_text()
    assert code.count("\n)\nID_PREFIXES =") == 1
    kinds_py.write_text(code.replace("\n)\nID_PREFIXES =", "\n" + NEW_KIND))
    (repo / "stages" / "export_jsonl.py").write_text(NEW_STAGE)
    names = repo / "stages" / "__init__.py"
    names.write_text(names.read_text().replace('    "export_rl",\n', '    "export_rl",\n    "export_jsonl",\n', 1))
    (repo / "schemas" / "jsonl_rows.yaml").write_text(NEW_SCHEMA)
    (repo / "sql" / "diff" / "rows_export_jsonl.sql").write_text(NEW_DIFF_ROWS)
    env = {"PYTHONPATH": str(repo / "src")}  # the copy's tracelake, not this checkout's

    generated = subprocess.run(
        [sys.executable, "-m", "stages.dvc_yaml"], cwd=repo, env={**os.environ, **env}, capture_output=True, text=True
    )
    assert generated.returncode == 0, generated.stderr
    stage = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["export_jsonl"]
    assert stage["do"]["outs"][0] == "${lake}/exports/jsonl/${key}"
    for scale in ("1k", "3k"):
        built = run_stage(repo, "export_jsonl", scale, env=env)
        assert built.returncode == 0, built.stderr
    out = repo / "lake" / "exports" / "jsonl" / "1k"
    manifest = read_manifest(out)
    jsonl_id = manifest["dataset_id"]
    assert jsonl_id.startswith("jsonl-1k-") and len((out / "rows.jsonl").read_bytes().splitlines()) == 1000

    status = run_tracelake(repo, "status", "--no-fresh", env=env)
    assert status.returncode == 0, status.stderr
    assert re.search(rf"│ jsonl-1k +│ {jsonl_id} +│ +1,000 │ +1,000 │", status.stdout), status.stdout

    count = run_tracelake(repo, "sql", f'SELECT count(*) AS n FROM "{jsonl_id}"', "--format", "csv", env=env)
    assert count.returncode == 0 and count.stdout.split() == ['"n"', "1000"], count.stderr

    diff = run_tracelake(repo, "diff", "jsonl-1k", "jsonl-3k", "--json", env=env)
    assert diff.returncode == 0, diff.stderr
    report = json.loads(diff.stdout)
    assert (report["a"]["dataset_id"], report["summary"]["rows_b"]) == (jsonl_id, 3160)
    assert report["params"] and not report["notes"]  # its lineage (selection, pool) found and checked
    moved = {r["stage"] for r in report["moved"]}
    assert moved and moved <= {"selection", "filter"}, moved

    staged = run_stage(repo, "report", env=env)
    assert staged.returncode == 0, staged.stderr
    assert f"jsonl-1k <code>{jsonl_id}</code>" in (repo / "reports" / "report.html").read_text()

    docs = written_doc_table("tracelake.core.datasets", ROOT / "docs" / "exploring.md", tmp_path, env)
    assert "| `export_jsonl` | `export_jsonl@<scale>` | `lake/exports/jsonl/<scale>/` |" in docs

    page = view_page(repo, "/datasets", tmp_path / "view.log", env)
    assert f"<code>{jsonl_id}</code>" in page and "diff with jsonl-1k" in page


def test_a_manifest_naming_a_file_outside_its_directory_is_refused(tmp_path):
    from tracelake.core.outputs import manifest_files

    (tmp_path / "d").mkdir()
    with pytest.raises(BadInput, match="table rows's file '../secret.parquet' is outside its directory"):
        manifest_files(tmp_path / "d", {"tables": {"rows": {"file": "../secret.parquet", "rows": 1}}}, "rows")
    assert manifest_files(tmp_path / "d", {"tables": {"rows": {"file": "rows.parquet", "rows": 1}}}, "rows") == [
        tmp_path / "d" / "rows.parquet"
    ]
