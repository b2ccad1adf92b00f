"""export_rl: tasks -> SkyRL PromptDataset shards + a Harbor task table + rejects.

Unit tests of the row building and the prompt-length rule; the stage on a small sample project
(synth -> tokenizer -> ingest@<source> -> export_rl, run through the stages' main functions): every
task accounted for, a content-named dataset, byte-identical reruns; SkyRL's own PromptDataset in the
training environment loads every exported row (none silently dropped) and would have dropped exactly
the rejected ones; the exported task table extracts back to the original task directories.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from stages.__main__ import main as run_stage_here
from tracelake.core.ids import dataset_label
from tracelake.core.outputs import read_manifest
from tracelake.core.schema import load_schema
from tracelake.export.rl import (
    DROP_RULES,
    GENERATION_PROMPT,
    REJECT_REASONS,
    TASK_RULES,
    RlSettings,
    RlStats,
    convert_batch,
    prompt_messages,
    prompt_row,
    prompt_tokens,
)
from tracelake.export.task_dirs import materialize
from tracelake.ingest.archive_read import Entry
from tracelake.ingest.task_archive import build_archive, extract_archive, extract_table
from tracelake.tokens.token_count import count_chatml_tokens
from tracelake.tokens.tokenizer import build_tokenizer, load_tokenizer

from ..helpers import ROOT, rl_trainer_python, run_tracelake

SKYRL_LOAD = ROOT / "tests" / "train_env" / "skyrl_load.py"
SYSTEM = "You are an agent in a Linux terminal. Solve the task, then say you are done."


# --- helpers ---------------------------------------------------------------------------------


@contextmanager
def cwd(path: Path):
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run(project: Path, stage: str, *args: str) -> None:
    with cwd(project):
        run_stage_here([stage, *args, "--params", "params.yaml"])


def digest(*paths: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for d in paths
        for p in sorted([d] if d.is_file() else d.rglob("*"))
        if p.is_file()
    }


def tree_of_archive(binary: bytes, scratch: Path) -> dict[str, tuple]:
    extract_archive(binary, scratch)
    try:
        return tree(scratch)
    finally:
        shutil.rmtree(scratch)


def read_shards(directory: Path, files: list[str]) -> list[dict]:
    return [r for f in files for r in pq.read_table(directory / f).to_pylist()]


def tree(root: Path) -> dict[str, tuple]:
    """Relative path -> ("dir",) or ("file", bytes, executable); links are an error."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        assert not stat.S_ISLNK(st.st_mode), p
        rel = p.relative_to(root).as_posix()
        out[rel] = ("dir",) if stat.S_ISDIR(st.st_mode) else ("file", p.read_bytes(), bool(st.st_mode & 0o111))
    return out


TASK_FILES = {
    "environment/Dockerfile": b"FROM ubuntu:24.04\n",
    "instruction.md": b"Print hello.\n",
    "task.toml": b'version = "1.0"\n',
    "tests/test.sh": b"#!/bin/sh\ntest -f hello\n",
}
TASK_ENTRIES = [Entry(d, True) for d in ("environment", "tests")] + [
    Entry(name, False, name.endswith(".sh"), data) for name, data in TASK_FILES.items()
]
TAR = build_archive(TASK_ENTRIES)


def task(name: str, instruction: str = "Print hello.\n", *, binary: bytes | None = TAR, source: str = "s1") -> dict:
    return {
        "task_id": f"id-{name}",
        "source": source,
        "name": name,
        "instruction": instruction,
        "task_checksum": f"sum-{name}",
        "task_binary": binary,
    }


SETTINGS = RlSettings(
    env_class="harbor", reward_method="rule", system_prompt=None, max_turns=32, max_prompt_length=8192
)


# --- unit: rows and the prompt-length rule ---------------------------------------------------


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(build_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer"))


def test_prompt_without_system_prompt_is_the_instruction_verbatim():
    t = task("hello", "  Print hello.\n\nThen exit.\n")
    row = prompt_row(t, prompt_messages(t["instruction"], None), SETTINGS)
    assert row == {
        "prompt": [{"role": "user", "content": "  Print hello.\n\nThen exit.\n"}],
        "env_class": "harbor",
        "reward_spec": {"method": "rule", "ground_truth": "s1.hello"},
        "data_source": "s1",
        "max_turns": 32,
        "task_id": "id-hello",
        "extra_info": {
            "task_id": "id-hello",
            "task": "hello",
            "source": "s1",
            "path": "s1.hello",
            "task_checksum": "sum-hello",
        },
    }


def test_prompt_with_system_prompt_leads_with_it():
    assert prompt_messages("Do it.", SYSTEM) == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Do it."},
    ]
    assert prompt_messages("Do it.", "") == [{"role": "user", "content": "Do it."}]


def test_struct_fields_are_the_same_on_every_row(tok):
    schema = load_schema("rl_prompts")
    rows = []
    for system in (None, SYSTEM):
        s = RlSettings("harbor", "rule", system, 8, 8192)
        rows += convert_batch([task("a"), task("b", "x" * 50)], s, tok, RlStats())[0]
    assert len({tuple(sorted(r)) for r in rows}) == 1
    assert len({tuple(sorted(r["reward_spec"])) for r in rows}) == 1
    assert len({tuple(sorted(r["extra_info"])) for r in rows}) == 1
    assert {tuple(sorted(m)) for r in rows for m in r["prompt"]} == {("content", "role")}
    table = schema.from_rows(rows)  # one arrow type for all of them, validated
    assert table.schema.field("extra_info").type.num_fields == 5
    harbor = convert_batch([task("a")], SETTINGS, tok, RlStats())[1]
    load_schema("harbor_tasks").from_rows(harbor)


def test_prompt_tokens_count_chatml_plus_the_generation_prompt(tok):
    prompts = [prompt_messages("Fix the failing build.", None), prompt_messages("ls -la\n" * 40, SYSTEM)]
    gen = len(tok.encode(GENERATION_PROMPT, add_special_tokens=False).ids)
    assert gen == 3  # <|im_start|>, assistant, \n
    assert prompt_tokens(tok, prompts) == [n + gen for n in count_chatml_tokens(tok, prompts)]


def test_rejects_missing_binaries_and_too_long_prompts_in_input_order(tok):
    tasks = [task("a"), task("b", binary=None), task("c", "word " * 400), task("d")]
    n = prompt_tokens(tok, [prompt_messages(t["instruction"], None) for t in tasks])
    limit = max(n[0], n[3])
    assert n[2] > limit
    stats = RlStats()
    settings = RlSettings("harbor", "rule", None, 32, limit, without_binary="reject")
    prompts, harbor, rejects = convert_batch(tasks, settings, tok, stats)
    assert [r["task_id"] for r in prompts] == [r["task_id"] for r in harbor] == ["id-a", "id-d"]
    assert [(r["item_id"], r["reason"]) for r in rejects] == [("id-b", "no_task_binary"), ("id-c", "prompt_too_long")]
    assert rejects[1]["detail"].startswith(f"{n[2]} prompt tokens > max_prompt_length {limit}")
    assert all(r["trajectory_id"] is None and r["reason"] in REJECT_REASONS for r in rejects)
    load_schema("export_rejects").from_rows(rejects)
    assert stats.as_json() == {
        "tasks_in": 4,
        "tasks_out": 2,
        "prompt_only": 0,
        "dropped": dict.fromkeys(DROP_RULES, 0),  # curation and the pick happen before (export_rl)
        "rejected": {"no_task_binary": 1, "incomplete_task": 0, "prompt_too_long": 1},
        "sources": {},
    }


def test_a_task_without_a_binary_is_rejected_by_default_or_a_prompt_without_a_task_row(tok):
    """Tasks derived from trace tables have no binary, hence no environment: rejected by default;
    with without_binary: prompt, a prompt all the same, and no task table row."""
    tasks = [task("a"), task("b", binary=None), task("d")]
    default = convert_batch(tasks, RlSettings("harbor", "rule", None, 32, 8192), tok, RlStats())
    assert [(r["item_id"], r["reason"]) for r in default[2]] == [("id-b", "no_task_binary")]
    stats = RlStats()
    settings = RlSettings("harbor", "rule", None, 32, 8192, without_binary="prompt")
    prompts, harbor, rejects = convert_batch(tasks, settings, tok, stats)
    assert [r["task_id"] for r in prompts] == ["id-a", "id-b", "id-d"] and not rejects
    assert [r["task_id"] for r in harbor] == ["id-a", "id-d"]
    assert prompts[1]["prompt"] == [{"role": "user", "content": tasks[1]["instruction"]}]
    assert stats.as_json() == {
        "tasks_in": 3,
        "tasks_out": 3,
        "prompt_only": 1,
        "dropped": dict.fromkeys(DROP_RULES, 0),
        "rejected": {"no_task_binary": 0, "incomplete_task": 0, "prompt_too_long": 0},
        "sources": {},
    }


def test_the_limit_is_inclusive_like_skyrl(tok):
    t = task("a")
    (n,) = prompt_tokens(tok, [prompt_messages(t["instruction"], None)])
    kept = convert_batch([t], RlSettings("harbor", "rule", None, 32, n), tok, RlStats())
    dropped = convert_batch([t], RlSettings("harbor", "rule", None, 32, n - 1), tok, RlStats())
    assert (len(kept[0]), len(kept[2])) == (1, 0)
    assert (len(dropped[0]), [r["reason"] for r in dropped[2]]) == (0, ["prompt_too_long"])


def test_harbor_row_normalizes_the_archive(tok):
    """A task table's archive made by another tool (mtimes, owners, a gzip name and time, members out
    of order, a top directory) is written as build_archive writes the same files: same files, same
    bytes; an archive already in that form is kept byte for byte."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=1700000000, filename="task.tar") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            members = [("task/tests", None), ("task/environment", None), *reversed(TASK_FILES.items())]
            for name, data in members:
                info = tarfile.TarInfo(name if name.startswith("task/") else f"task/{name}")
                info.mtime, info.uid, info.gid, info.uname = 1700000000 + len(name), 1000, 1000, "someone"
                if data is None:
                    info.type, info.mode = tarfile.DIRTYPE, 0o775
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(data), 0o775 if name.endswith(".sh") else 0o664
                    tar.addfile(info, io.BytesIO(data))
    foreign = buf.getvalue()
    assert foreign != TAR
    _, (row,), _ = convert_batch([task("a", binary=foreign)], SETTINGS, tok, RlStats())
    assert row == {
        "path": "s1.a",
        "task_binary": TAR,
        "task_id": "id-a",
        "source": "s1",
        "name": "a",
        "task_checksum": "sum-a",
    }
    assert convert_batch([task("a")], SETTINGS, tok, RlStats())[1][0]["task_binary"] == TAR


def test_a_task_harbor_cannot_run_is_rejected_with_what_it_lacks(tok):
    """A Harbor trial needs instruction.md, task.toml, environment/ and tests/."""
    partial_tar = build_archive([e for e in TASK_ENTRIES if not e.name.startswith(("tests", "task.toml"))])
    prompts, harbor, rejects = convert_batch([task("a"), task("b", binary=partial_tar)], SETTINGS, tok, RlStats())
    assert [p["task_id"] for p in prompts] == [h["task_id"] for h in harbor] == ["id-a"]
    assert [(r["item_id"], r["reason"], r["detail"]) for r in rejects] == [
        ("id-b", "incomplete_task", "the task directory has no task.toml, tests/: Harbor cannot run it")
    ]


# --- the stage on a small sample project -----------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project dir with the sample (small), the tokenizer and every source's ingest built."""
    project = tmp_path_factory.mktemp("rl-project")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["synth"].update(trials=40, tasks=24)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(project, "synth")
    run(project, "tokenizer")
    for source in params["sources"]:
        run(project, "ingest", source)
    run(project, "dedup")
    return project


@pytest.fixture(scope="module")
def export(project) -> Path:
    run(project, "export_rl")
    return project / "lake" / "exports" / "rl"


@pytest.fixture(scope="module")
def variant(project, tmp_path_factory) -> Path:
    """Two sources, a system prompt, a tight max_prompt_length (the median prompt's length) and one
    task whose task_binary is null: both reject reasons occur."""
    v = tmp_path_factory.mktemp("rl-variant")
    params = yaml.safe_load((project / "params.yaml").read_text())
    shutil.copytree(project / "lake" / "tasks", v / "lake" / "tasks")
    shutil.copytree(project / "lake" / "dedup", v / "lake" / "dedup")
    source, other = "swesmith", "superuser"
    path = v / "lake" / "tasks" / source / "tasks.parquet"
    table = pq.read_table(path)
    binaries = table.column("task_binary").to_pylist()
    binaries[1] = None
    column = table.schema.get_field_index("task_binary")
    table = table.set_column(column, "task_binary", pa.array(binaries, pa.binary()))
    pq.write_table(load_schema("tasks").validate(table), path)
    tok = load_tokenizer(project / "data" / "tokenizer")
    rows = [
        r
        for s in (source, other)
        for r in pq.read_table(v / "lake" / "tasks" / s / "tasks.parquet").to_pylist()
        if r["task_binary"] is not None
    ]
    lengths = sorted(prompt_tokens(tok, [prompt_messages(r["instruction"], SYSTEM) for r in rows]))
    params["export_rl"].update(
        sources=[source, other],
        system_prompt=SYSTEM,
        without_binary="reject",
        max_prompt_length=lengths[len(lengths) // 2],
        rows_per_shard=3,
        tokenizer=str(project / "data" / "tokenizer"),
    )
    (v / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(v, "export_rl")
    return v / "lake" / "exports" / "rl"


def check_export(out: Path, lake: Path, sources: list[str]) -> dict:
    """The accounting, the layout, the dataset id, prompts and tasks aligned; returns the manifest."""
    m = read_manifest(out)
    c = m["counts"]
    tasks_in = sum(read_manifest(lake / "tasks" / s)["counts"]["rows"] for s in sources)
    assert c["tasks_in"] == tasks_in == c["tasks_out"] + sum(c["dropped"].values()) + sum(c["rejected"].values())
    assert set(c["rejected"]) == set(REJECT_REASONS) and set(c["dropped"]) == set(DROP_RULES)
    assert set(c["sources"]) == set(sources)
    for f in c["sources"].values():
        assert f["in"] == f["out"] + sum(f["dropped"].values()) + sum(f["rejected"].values())
    for key in ("out", "in"):
        assert sum(f[key] for f in c["sources"].values()) == c[f"tasks_{key}"]
    label, digest_ = re.fullmatch(r"rl-([0-9.]+k?)-([0-9a-f]{12})", m["dataset_id"]).groups()
    assert label == dataset_label(c["tasks_out"]) and digest_ == m["tables"]["rl_prompts"]["version_id"]
    assert c["dataset_id"] == m["dataset_id"] and m["kind"] == "export_rl"
    assert m["formulas"] == {"prompts": "skyrl_prompt_v1"}
    assert set(m["inputs"]["tasks"]) == set(sources) and len(m["inputs"]["tokenizer"]) == 64
    assert {n: t["file"] for n, t in m["tables"].items()} == {
        "rl_prompts": "prompts/",
        "harbor_tasks": "tasks/",
        "rl_dropped": "rl_dropped.parquet",
        "export_rejects": "export_rejects.parquet",
    }
    n_files = -(-c["tasks_out"] // m["params"]["rows_per_shard"])
    n_task_files = -(-(c["tasks_out"] - c["prompt_only"]) // m["params"]["rows_per_shard"])
    assert c["files"]["prompts"] == [f"prompts/train-{i:05d}.parquet" for i in range(n_files)]
    assert c["files"]["tasks"] == [f"tasks/train-{i:05d}.parquet" for i in range(n_task_files)]
    assert c["shards"] == n_files
    listed = (p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert sorted(listed) == sorted(  # no task directories: a table of them (DVC walks no tree)
        [*c["files"]["prompts"], *c["files"]["tasks"], "rl_dropped.parquet", "export_rejects.parquet", "manifest.json"]
    )
    for f in c["files"]["prompts"]:
        load_schema("rl_prompts").validate(pq.read_table(out / f))
    for f in c["files"]["tasks"]:
        load_schema("harbor_tasks").validate(pq.read_table(out / f))
    prompts, tasks = read_shards(out, c["files"]["prompts"]), read_shards(out, c["files"]["tasks"])
    rejects = load_schema("export_rejects").validate(pq.read_table(out / "export_rejects.parquet")).to_pylist()
    assert len(prompts) == c["tasks_out"] == m["tables"]["rl_prompts"]["rows"]
    assert len(tasks) == c["tasks_out"] - c["prompt_only"] == m["tables"]["harbor_tasks"]["rows"]
    assert len(rejects) == sum(c["rejected"].values()) == m["tables"]["export_rejects"]["rows"]
    binaries = {
        r["task_id"]
        for s in sources
        for r in pq.read_table(lake / "tasks" / s / "tasks.parquet", columns=["task_id", "task_binary"]).to_pylist()
        if r["task_binary"]
    }
    assert [p["task_id"] for p in prompts if p["task_id"] in binaries] == [t["task_id"] for t in tasks]
    assert [(t["source"], t["name"]) for t in tasks] == sorted((t["source"], t["name"]) for t in tasks)
    ingested = {
        r["task_id"]
        for s in sources
        for r in pq.read_table(lake / "tasks" / s / "tasks.parquet", columns=["task_id"]).to_pylist()
    }
    dropped = load_schema("rl_dropped").validate(pq.read_table(out / "rl_dropped.parquet")).to_pylist()
    assert len(dropped) == sum(c["dropped"].values()) == m["tables"]["rl_dropped"]["rows"]
    outcomes = [{p["task_id"] for p in prompts}, {r["item_id"] for r in rejects}, {d["task_id"] for d in dropped}]
    assert set().union(*outcomes) == ingested and sum(map(len, outcomes)) == len(ingested)
    # the filter's task-level rules: no contaminated task and no near-duplicate loser is exported
    dedup = lake / "dedup"
    contaminated = set(pq.read_table(dedup / "contamination.parquet").column("task_id").to_pylist()) & ingested
    clusters = pq.read_table(dedup / "task_clusters.parquet").to_pylist()
    losers = {k["task_id"] for k in clusters if k["dropped"]} & ingested
    curated = {d["task_id"] for d in dropped if d["rule"] in TASK_RULES}
    assert curated == contaminated | losers
    assert {d["task_id"] for d in dropped if d["rule"] == "contaminated_v1"} == contaminated
    assert not (contaminated | losers) & ({p["task_id"] for p in prompts} | {t["task_id"] for t in tasks})
    # SkyRL's HarborTaskDataset contract (examples/train_integrations/harbor, in SkyRL's repository, not
    # its wheel): data.train_data names a directory whose immediate subdirectories holding an
    # instruction.md are the tasks; Harbor then needs task.toml, environment/ and tests/ in each.
    # `tracelake train rl` extracts them from the task table (export/task_dirs.py), once.
    assert c["task_dirs"] == {"table": "tasks/", "count": len(tasks)}
    harbor = out.parent.parent.parent / f".runs-check-{m['dataset_id']}" / "harbor"
    shutil.rmtree(harbor.parent, ignore_errors=True)
    assert materialize(out, m, harbor) == (len(tasks), True)
    assert materialize(out, m, harbor) == (len(tasks), False)  # there: reused
    names = [d.name for d in harbor.iterdir()]
    assert all((harbor / n).is_dir() and not (harbor / n).is_symlink() for n in names)
    assert sorted(names) == [t["path"] for t in tasks] == sorted({t["path"] for t in tasks})  # sorted, unique
    for t in tasks:
        d = harbor / t["path"]
        assert (d / "instruction.md").is_file() and (d / "task.toml").is_file(), t["path"]
        assert (d / "environment").is_dir() and (d / "tests").is_dir(), t["path"]
        assert not [p for p in d.iterdir() if p.is_dir() and (p / "instruction.md").exists()]  # one level
        assert tree(d) == tree_of_archive(t["task_binary"], out.parent / f".check-{t['path']}")
    for p, t in zip([p for p in prompts if p["task_id"] in binaries], tasks, strict=True):
        assert p["reward_spec"]["ground_truth"] == p["extra_info"]["path"] == t["path"] == f"{t['source']}.{t['name']}"
        assert (p["data_source"], p["extra_info"]["task"], p["extra_info"]["task_checksum"]) == (
            t["source"],
            t["name"],
            t["task_checksum"],
        )
    shutil.rmtree(harbor.parent)
    return m


def test_stage_exports_every_task_of_every_source(project, export):
    params = yaml.safe_load((project / "params.yaml").read_text())
    m = check_export(export, project / "lake", list(params["sources"]))
    assert m["counts"]["rejected"] == {"no_task_binary": 0, "incomplete_task": 0, "prompt_too_long": 0}
    assert m["params"] == {**params["export_rl"], "contaminated": True, "near_duplicates": True}
    assert json.loads((project / "metrics" / "export_rl.json").read_text()) == m["counts"]
    prompts = read_shards(export, m["counts"]["files"]["prompts"])
    assert {p["env_class"] for p in prompts} == {"harbor"} and {p["max_turns"] for p in prompts} == {32}
    assert all(len(p["prompt"]) == 1 and p["prompt"][0]["role"] == "user" for p in prompts)


def test_stage_rejects_missing_binaries_and_long_prompts(variant):
    m = check_export(variant, variant.parents[1], ["swesmith", "superuser"])
    c = m["counts"]
    assert c["rejected"]["no_task_binary"] == 1 and c["rejected"]["prompt_too_long"] > 0
    assert c["tasks_out"] > 3 and len(c["files"]["prompts"]) > 1
    prompts = read_shards(variant, c["files"]["prompts"])
    assert all(
        [m_["role"] for m_ in p["prompt"]] == ["system", "user"] and p["prompt"][0]["content"] == SYSTEM
        for p in prompts
    )
    assert m["params"]["max_prompt_length"] in prompt_tokens(
        load_tokenizer(m["params"]["tokenizer"]), [p["prompt"] for p in prompts]
    )  # one sits on the limit


def test_no_benchmark_copy_or_near_duplicate_loser_reaches_rl_on_the_sample(sample_project):
    """The question a user asked of the built sample, asked again: RL prompts and the Harbor task
    table hold no task the dedup stage found in a benchmark or dropped as a near-duplicate."""
    ask = partial(run_tracelake, sample_project, "sql", "--format", "csv")

    def count(query: str) -> int:
        proc = ask(query)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.strip().splitlines()[-1])

    contaminated, losers = (
        count("select count(*) from contamination"),
        count("select count(*) from task_clusters where dropped"),
    )
    assert contaminated > 0 and losers > 0  # the sample plants both
    for table in ("rl_prompts", "harbor_tasks"):
        assert count(f"select count(*) from {table} where task_id in (select task_id from contamination)") == 0
        assert (
            count(f"select count(*) from {table} where task_id in (select task_id from task_clusters where dropped)")
            == 0
        )
    m = read_manifest(sample_project / "lake" / "exports" / "rl")
    dropped = pq.read_table(sample_project / "lake" / "exports" / "rl" / "rl_dropped.parquet").to_pylist()
    assert m["counts"]["dropped"] == {rule: sum(d["rule"] == rule for d in dropped) for rule in DROP_RULES}
    assert m["counts"]["dropped"]["rl_pick_v1"] == m["counts"]["dropped"]["rl_score_bounds_v1"] == 0  # no pick
    # a contaminated task in the sample is dropped under its rule, with the benchmark item named
    assert all(d["detail"].startswith("benchmark ") for d in dropped if d["rule"] == "contaminated_v1")
    assert m["counts"]["dropped"]["contaminated_v1"] > 0 and m["counts"]["dropped"]["near_duplicate_v1"] > 0


def test_stage_is_deterministic(project, export):
    before = digest(export, project / "metrics" / "export_rl.json")
    run(project, "export_rl")
    assert digest(export, project / "metrics" / "export_rl.json") == before


def test_exported_task_table_extracts_to_the_original_task_directories(project, export, tmp_path):
    m = read_manifest(export)
    tasks = read_shards(export, m["counts"]["files"]["tasks"])
    first = tasks[0]
    one = tmp_path / "one"
    extract_archive(first["task_binary"], one)
    assert tree(one) == tree(project / "data" / "sample" / first["source"] / "tasks" / first["name"])
    everything = tmp_path / "all"
    for f in m["counts"]["files"]["tasks"]:
        extract_table(export / f, everything)
    extracted = sorted(p.relative_to(everything).as_posix() for p in everything.glob("*"))
    assert extracted == sorted(t["path"] for t in tasks)
    for t in tasks:
        original = tree(project / "data" / "sample" / t["source"] / "tasks" / t["name"])
        assert tree(everything / t["path"]) == original, t["path"]
    for p in read_shards(export, m["counts"]["files"]["prompts"]):  # the prompt is the extracted instruction
        instruction = everything / p["reward_spec"]["ground_truth"] / "instruction.md"
        assert instruction.read_text() == p["prompt"][-1]["content"]


# --- SkyRL's own loader, in the training environment ------------------------------------------

TRAINERS = ["skyrl", "skyrl-train"]  # export/params.py RL_TRAINERS: each in its own environment
PACKAGES = {"skyrl": "skyrl.train.dataset.dataset", "skyrl-train": "skyrl_train.dataset.dataset"}


def skyrl_load(files: list[Path], tokenizer: Path, max_prompt_length: int, tmp: Path, trainer: str) -> dict:
    python = rl_trainer_python(trainer)
    result = tmp / "skyrl.json"
    env = dict(
        os.environ,
        HF_DATASETS_CACHE=str(tmp / "hf-datasets"),
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp / "hf"),
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    proc = subprocess.run(
        [
            str(python),
            str(SKYRL_LOAD),
            "--tokenizer",
            str(tokenizer),
            "--max-prompt-length",
            str(max_prompt_length),
            "--out",
            str(result),
            *map(str, files),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"skyrl_load failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    got = json.loads(result.read_text())
    assert got["package"] == PACKAGES[trainer]
    return got


@pytest.mark.train_env
@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("which", ["export", "variant"])
def test_skyrl_prompt_dataset_loads_every_row(which, trainer, request, project, tmp_path):
    out: Path = request.getfixturevalue(which)
    m = read_manifest(out)
    files = [out / f for f in m["counts"]["files"]["prompts"]]
    tokenizer = Path(m["params"]["tokenizer"])
    tokenizer = tokenizer if tokenizer.is_absolute() else project / tokenizer
    got = skyrl_load(files, tokenizer, m["params"]["max_prompt_length"], tmp_path, trainer)
    # transformers 4 (skyrl-train's environment) / 5 (skyrl's) name the same fast tokenizer
    assert got["tokenizer_class"] in ("PreTrainedTokenizerFast", "TokenizersBackend")
    assert got["len"] == len(got["items"]) == m["counts"]["tasks_out"]  # nothing dropped
    rows = read_shards(out, m["counts"]["files"]["prompts"])
    ours = prompt_tokens(load_tokenizer(tokenizer), [r["prompt"] for r in rows])
    for i, (item, row) in enumerate(zip(got["items"], rows)):
        assert item["uid"] == str(i)
        assert item["env_class"] == row["env_class"] == m["params"]["env_class"]
        assert item["messages"] == row["prompt"]
        extras = ("reward_spec", "data_source", "max_turns", "task_id", "extra_info")
        assert item["extra"] == {k: row[k] for k in extras}
        assert set(item["extra"]["reward_spec"]) == {"method", "ground_truth"}
        assert set(item["extra"]["extra_info"]) == {"task_id", "task", "source", "path", "task_checksum"}
        assert item["n_tokens"] == ours[i] <= m["params"]["max_prompt_length"]  # our count is SkyRL's count


@pytest.mark.train_env
@pytest.mark.parametrize("trainer", TRAINERS)
def test_skyrl_would_drop_exactly_the_rejected_long_prompts(trainer, variant, tmp_path):
    """The prompt_too_long rejects, written as prompt rows, are all filtered out by PromptDataset."""
    m = read_manifest(variant)
    p = m["params"]
    long_ids = {
        r["item_id"]
        for r in pq.read_table(variant / "export_rejects.parquet").to_pylist()
        if r["reason"] == "prompt_too_long"
    }
    tasks = [
        r
        for s in p["sources"]
        for r in pq.read_table(variant.parents[1] / "tasks" / s / "tasks.parquet").to_pylist()
        if r["task_id"] in long_ids
    ]
    settings = RlSettings(p["env_class"], p["reward_method"], p["system_prompt"], p["max_turns"], 10**9)
    rows = convert_batch(tasks, settings, load_tokenizer(p["tokenizer"]), RlStats())[0]
    assert len(rows) == len(long_ids) > 0
    path = tmp_path / "long.parquet"
    pq.write_table(load_schema("rl_prompts").from_rows(rows), path)
    got = skyrl_load([path], Path(p["tokenizer"]), p["max_prompt_length"], tmp_path, trainer)
    assert got["len"] == 0


# --- the pick (export_rl.pick, export/rl_pick.py) --------------------------------------------------


def uniform_rank(task_id: str, seed: int = 0) -> bytes:
    """The uniform order, computed here from its definition (rl_pick.py's docstring)."""
    return hashlib.sha256(f"{seed}\0{task_id}".encode()).digest()


@pytest.fixture(scope="module")
def scored(project, tmp_path_factory) -> Path:
    """A copy of the project with the score stage run (response_length_proxy_v1 task scores)."""
    v = tmp_path_factory.mktemp("rl-scored") / "project"
    shutil.copytree(project, v)
    run(v, "score")
    return v


def default_pick() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())["export_rl"]["pick"]


def export_with_pick(project: Path, **pick) -> tuple[dict, list[dict], list[dict]]:
    """export_rl with export_rl.pick set to `pick` in `project`: (manifest, prompts, rl_dropped rows)."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["export_rl"]["pick"] = {**default_pick(), **pick}
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(project, "export_rl")
    out = project / "lake" / "exports" / "rl"
    m = check_export(out, project / "lake", list(params["sources"]))
    return m, read_shards(out, m["counts"]["files"]["prompts"]), pq.read_table(out / "rl_dropped.parquet").to_pylist()


def scores_of(project: Path) -> dict[str, float]:
    rows = pq.read_table(project / "lake" / "scores" / "scores.parquet").to_pylist()
    return {r["task_id"]: r["score"] for r in rows if r["scorer"] == "response_length_proxy_v1"}


def test_pick_takes_n_tasks_uniformly_from_what_would_be_exported(scored, export):
    pool = [p["task_id"] for p in read_shards(export, read_manifest(export)["counts"]["files"]["prompts"])]
    m, prompts, dropped = export_with_pick(scored, tasks=7)
    c = m["counts"]
    assert c["tasks_out"] == 7 and c["picked"] == {"tasks": 7, "from": len(pool)}
    assert {p["task_id"] for p in prompts} == set(sorted(pool, key=uniform_rank)[:7])
    not_picked = [d for d in dropped if d["rule"] == "rl_pick_v1"]
    assert len(not_picked) == c["dropped"]["rl_pick_v1"] == len(pool) - 7
    assert {d["task_id"] for d in not_picked} == set(pool) - {p["task_id"] for p in prompts}
    assert all(
        re.fullmatch(r"rank \d+ of \d+ \(uniform, seed 0\): not among the 7 picked", d["detail"]) for d in not_picked
    )
    # the task table is exactly the picked tasks
    table = pq.read_table(scored / "lake/exports/rl/tasks", columns=["path"]).column("path").to_pylist()
    assert sorted(table) == sorted(p["extra_info"]["path"] for p in prompts)
    # fewer is a prefix of more; another seed is another draw; the same params give the same bytes
    _, fewer, _ = export_with_pick(scored, tasks=3)
    assert {p["task_id"] for p in fewer} < {p["task_id"] for p in prompts}
    _, reseeded, _ = export_with_pick(scored, tasks=7, seed=1)
    assert {p["task_id"] for p in reseeded} == set(sorted(pool, key=lambda t: uniform_rank(t, 1))[:7])
    export_with_pick(scored, tasks=7, seed=0)
    first = digest(scored / "lake/exports/rl")
    export_with_pick(scored, tasks=7, seed=0)
    assert digest(scored / "lake/exports/rl") == first


def test_pick_by_score_within_bounds(scored, export):
    pool = [p["task_id"] for p in read_shards(export, read_manifest(export)["counts"]["files"]["prompts"])]
    score = scores_of(scored)
    values = sorted(score[t] for t in pool)
    low, high = values[len(values) // 4], values[3 * len(values) // 4]
    m, prompts, dropped = export_with_pick(
        scored, tasks=4, order="highest", score="response_length_proxy_v1", min_score=low, max_score=high
    )
    within = [t for t in pool if low <= score[t] <= high]
    want = sorted(within, key=lambda t: (-score[t], t))[:4]
    assert [p["task_id"] for p in sorted(prompts, key=lambda p: (-score[p["task_id"]], p["task_id"]))] == want
    bounded = {d["task_id"]: d["detail"] for d in dropped if d["rule"] == "rl_score_bounds_v1"}
    assert set(bounded) == set(pool) - set(within)  # a task the curation dropped keeps its curation rule
    assert all(re.fullmatch(r"response_length_proxy_v1 \S+ ([<>]) (min|max)_score \S+", d) for d in bounded.values())
    assert m["counts"]["picked"] == {"tasks": 4, "from": len(within)}
    assert m["inputs"]["scores"] == read_manifest(scored / "lake" / "scores")["version_id"]
    _, lowest, _ = export_with_pick(scored, tasks=4, order="lowest", score="response_length_proxy_v1")
    assert {p["task_id"] for p in lowest} == set(sorted(pool, key=lambda t: (score[t], t))[:4])


def test_pick_splits_the_count_across_sources_by_weight(scored, export):
    pool = read_shards(export, read_manifest(export)["counts"]["files"]["prompts"])
    by_source = {s: [p["task_id"] for p in pool if p["data_source"] == s] for s in ("swesmith", "superuser")}
    m, prompts, dropped = export_with_pick(scored, tasks=5, weights={"swesmith": 0.6, "superuser": 0.4})
    got = {s: {p["task_id"] for p in prompts if p["data_source"] == s} for s in by_source}
    assert got == {s: set(sorted(ids, key=uniform_rank)[:n]) for (s, ids), n in zip(by_source.items(), (3, 2))}
    assert {p["data_source"] for p in prompts} == {"swesmith", "superuser"}  # a source not named gets none
    f = m["counts"]["sources"]
    assert f["swesmith"]["out"] == 3 and f["superuser"]["out"] == 2 and f["tezos"]["out"] == 0
    assert any(d["detail"].endswith("not among its 0 of 5 (export_rl.pick.weights)") for d in dropped)


def test_pick_asking_for_more_than_there_is_stops_the_stage_in_one_line(scored, export):
    pool = read_manifest(export)["counts"]["tasks_out"]
    for pick, says in (
        ({"tasks": pool + 1}, f"export_rl.pick.tasks is {pool + 1}, but only {pool} tasks pass"),
        ({"tasks": pool, "weights": {"tezos": 1}}, f"export_rl.pick.weights give tezos {pool} of {pool} tasks"),
        ({"tasks": 2, "score": "difficulty_v1"}, "export_rl.pick.score: "),
    ):
        params = yaml.safe_load((scored / "params.yaml").read_text())
        params["export_rl"]["pick"] = {**default_pick(), **pick}
        (scored / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        proc = subprocess.run(
            [os.sys.executable, "-m", "stages", "export_rl", "--params", "params.yaml"],
            cwd=scored,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"},
        )
        assert proc.returncode != 0 and says in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    ("pick", "says"),
    [
        ({"order": "highest"}, "needs export_rl.pick.score"),
        ({"min_score": 1}, "needs export_rl.pick.score"),
        ({"score": "response_length_proxy_v1", "min_score": 2, "max_score": 1}, "is above max_score"),
        ({"weights": {"swesmith": 1}}, "set tasks too"),
        ({"tasks": 3, "weights": {"swesmith": 0.5}}, "must sum to 1"),
        ({"tasks": 3, "weights": {"nowhere": 1}}, "not an exported source"),
        ({"score": "difficulty_v1"}, "is not a configured scorer"),
        ({"tasks": 0}, "export_rl.pick.tasks"),
        ({"tasks": 3, "order": "random"}, "export_rl.pick.order"),
    ],
)
def test_pick_params_are_checked(pick, says):
    from tracelake.core.errors import BadParams
    from tracelake.params import parse_params

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["export_rl"]["pick"] = {**params["export_rl"]["pick"], **pick}
    with pytest.raises(BadParams, match=re.escape(says)):
        parse_params(params)
