"""Every file a DVC stage's output depends on is a declared dependency of that stage in dvc.yaml,
so `dvc repro` never leaves an output stale after a change to code, SQL, a schema or data.

1. Static: dvc.yaml is written from the stage declarations by `python -m stages.dvc_yaml`; each
   stage's code deps are the import closure of `python -m stages NAME` with the params code of the
   sections it reads, and the SQL and schema files that code names through the asset loaders
   (stages/closure.py has the rules). The committed dvc.yaml must be exactly what it writes.
2. Dynamic (e2e): each stage (each foreach item) of a copy of the built sample project runs once,
   with the copy's own src/ first on sys.path, under an audit hook (tests/trace_stage.py; "open"
   events) and, where strace is installed and allowed, under `strace -f` too (every open(2): DuckDB,
   Arrow and tokenizers open their files themselves, without an audit event). Every project file
   the stage opens for reading before writing it is covered by a dep of that stage, except its own
   outputs (outs, metrics, plots), params.yaml when the stage declares `params` (DVC tracks those
   keys) and content-addressed caches (CACHE_PARAMS). A manifest of files (core/scan.py: a source's,
   which `scan` writes and ingest depends on; synth's record of the sample), as a dep or an out,
   covers the files it lists. This catches data (a table, a manifest) as
   well as code. The audit test also shows the same check reporting a data dep once it is removed;
   the strace test skips, saying why, where strace cannot run.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from stages import NAMES, code, declared, dvc_yaml
from stages.closure import stage_closure
from stages.dvc_yaml import code_deps, render

from ..depcheck import (
    FAKE_PROJECT,
    ROOT,
    Trace,
    _paths,
    covered,
    expand_stages,
    explain,
    load_yaml,
    manifest_inputs,
    outputs_of,
    strace,
    trace_stage,
    unexplained_reads,
)


def test_dvc_yaml_is_written_from_the_declarations() -> None:
    """dvc.yaml is exactly what `python -m stages.dvc_yaml` writes: each stage's deps are the import
    closure of `python -m stages NAME` (stages/closure.py) plus its declared data."""
    assert (ROOT / "dvc.yaml").read_text() == render(ROOT / "params.yaml"), (
        "dvc.yaml is out of date with the stage declarations: run `python -m stages.dvc_yaml`"
    )


def test_check_reports_a_removed_dep(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--check` fails, naming the line, when dvc.yaml lacks a dep the declarations give."""
    text = (ROOT / "dvc.yaml").read_text()
    edited = text.replace("      - .tracelake/code/filter.txt\n", "", 1)
    assert edited != text
    (tmp_path / "dvc.yaml").write_text(edited)
    assert dvc_yaml.main(["--check", "--out", str(tmp_path / "dvc.yaml"), "--params", str(ROOT / "params.yaml")]) == 1
    assert "+      - .tracelake/code/filter.txt" in capsys.readouterr().out


def test_each_stage_depends_on_its_code_digest(tmp_path: Path) -> None:
    """`code` writes one digest a stage: a sha256 line per file of its closure, every file under a
    directory `code` depends on (so editing any of them reruns `code`), the same bytes twice; each
    stage's first dep in dvc.yaml is its digest."""
    first, second = tmp_path / "a", tmp_path / "b"
    code.write(first)
    code.write(second)
    dvc = load_yaml(ROOT / "dvc.yaml")["stages"]
    assert dvc["code"]["deps"] == list(code.WATCHED) and dvc["code"]["outs"] == [code.OUT]
    for name in NAMES:
        text = (first / f"{name}.txt").read_text()
        assert text == (second / f"{name}.txt").read_text()
        files = [line.split("  ", 1)[1] for line in text.splitlines()]
        assert files == sorted(files) and set(files) == set(code.code_files(name))
        assert all(covered(f, list(code.WATCHED)) for f in files), name
        stage = dvc[name].get("do", dvc[name])
        assert stage["deps"][0] == code.digest_path(name)
    assert "src/tracelake/curate/filter.py" in code.code_files("filter")
    assert "sql/filter_rules/min_assistant_turns.sql" in code.code_files("filter")
    assert "src/tracelake/curate/filter.py" not in code.code_files("ingest")


def test_a_stage_depends_on_its_own_params_code_only() -> None:
    """ingest reads no curate or export section, so editing their params modules reruns none of it;
    a filter rule (curate/filter_rules.py, filter's params) or a scorer (scorers.py, score's) reruns
    no select."""
    deps = code_deps(declared("ingest"))
    assert covered("src/tracelake/ingest/params.py", deps)
    assert not [d for d in deps if d.startswith(("src/tracelake/curate", "src/tracelake/export"))], deps
    assert covered("src/tracelake/curate/filter_params.py", code_deps(declared("filter")))
    assert covered("src/tracelake/curate/score_params.py", code_deps(declared("score")))
    select = code_deps(declared("select"))
    assert covered("src/tracelake/curate/params.py", select)
    assert not [d for d in select if d.endswith(("filter_rules.py", "filter_params.py", "scorers.py"))], select


def test_closure_rules(tmp_path: Path) -> None:
    """Lazy, relative and `from pkg import module` imports count, TYPE_CHECKING ones and modules never
    imported do not; loader arguments map to files by the rules in stages/closure.py."""
    for rel, text in FAKE_PROJECT.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    files = stage_closure("stages/s.py", tmp_path).files
    assert sorted(files) == sorted(
        [
            "stages/s.py",
            "src/tracelake/__init__.py",
            "src/tracelake/core/__init__.py",
            "src/tracelake/core/assets.py",
            "src/tracelake/core/schema.py",
            "src/tracelake/core/tables.py",
            "src/tracelake/lib.py",
            "sql/filter_rules",  # 'filters/' + rule: the directory its literal prefix names
            "sql",  # f'{rule}.x': no literal prefix, the whole directory
            "schemas/a.yaml",
            "schemas/b.yaml",  # a loop over literals
            "schemas/const.yaml",  # a module-level constant
            "schemas/pool.yaml",  # through the wrapper read_table(directory, name)
        ]
    ), "\n".join(f"{f}: {why}" for f, why in sorted(files.items()))


# --------------------------------------------------------------------------------------------------
# Dynamic: run each stage in a copy of the built sample project and record what it reads


def _copy(src: Path, dst: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {"cache", "tmp"} & set(names) if Path(directory).name == ".dvc" else set()

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)
    return dst


def _digest_files(project: Path, dep: str) -> list[str]:
    if not dep.startswith(code.OUT + "/"):
        return [dep]
    return [dep, *(line.split("  ", 1)[1] for line in (project / dep).read_text().splitlines())]


@dataclass
class Traced:
    params: dict[str, Any]
    stages: dict[str, dict[str, Any]]
    traces: dict[str, Trace]
    seconds: float


@pytest.fixture(scope="module")
def traced(sample_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """Every stage (every foreach item) run once, in dvc.yaml order, in a copy of the built sample."""
    start = time.monotonic()
    project = _copy(sample_project, tmp_path_factory.mktemp("deps") / "project").resolve()
    dvc, params = load_yaml(project / "dvc.yaml"), load_yaml(project / "params.yaml")
    stages = expand_stages(dvc, params, project)
    for stage in stages.values():  # a code digest dep stands for the files it lists; a manifest (a dep
        # or an out) for the inputs it lists
        deps = [f for d in _paths(stage.get("deps")) for f in _digest_files(project, d)]
        listed = [i for e in _paths(stage.get("deps")) + outputs_of(stage) for i in manifest_inputs(project, e)]
        stage["deps"] = deps + listed
    strace_path = strace()
    traces = {}
    for name, stage in stages.items():
        traces[name] = trace_stage(project, stage["cmd"], strace_path)
        package = traces[name].package
        assert package is None or Path(package).resolve().is_relative_to(project), (
            f"{name}: tracelake was imported from {package}, not from the copy's src/: its reads are unseen"
        )
    return Traced(params, stages, traces, time.monotonic() - start)


@pytest.mark.e2e
def test_every_stage_declares_what_it_opens(traced: Traced) -> None:
    print(f"{len(traced.traces)} stage runs traced in {traced.seconds:.1f}s")
    missing = [
        m
        for name, stage in traced.stages.items()
        for m in unexplained_reads(name, stage, traced.traces[name].reads, traced.params)
    ]
    assert not missing, explain(missing, "files the stage opened through Python while it ran")

    # The same check reports a data dependency once it is gone from the stage's deps.
    name, dep = next(
        (n, d)
        for n, t in reversed(traced.traces.items())
        for r in t.reads
        if r.file.endswith("manifest.json")
        for d in _paths(traced.stages[n].get("deps"))
        if covered(r.file, [d])
    )
    stage = traced.stages[name]
    without = {**stage, "deps": [d for d in _paths(stage["deps"]) if d != dep]}
    reads = traced.traces[name].reads
    gone = {r.file for r in reads if covered(r.file, [dep]) and not covered(r.file, _paths(without["deps"]))}
    reported = unexplained_reads(name, without, reads, traced.params)
    assert gone and {m.file for m in reported} == gone, explain(reported, f"without {name}: {dep}")


@pytest.mark.e2e
def test_every_stage_declares_what_native_code_reads(traced: Traced) -> None:
    """The same over every open(2) (DuckDB, Arrow and tokenizers open their files themselves)."""
    if any(t.native is None for t in traced.traces.values()):
        pytest.skip(
            "strace is not installed or may not trace here (apt-get install strace): "
            "reads by native code were not recorded"
        )
    missing = [
        m
        for name, stage in traced.stages.items()
        for m in unexplained_reads(name, stage, traced.traces[name].native or [], traced.params)
    ]
    assert not missing, explain(missing, "files the stage's process opened while it ran (strace)")


def test_synth_is_left_out_when_no_source_reads_the_sample(tmp_path: Path) -> None:
    """A project of its own data (sources and decontamination root) does not build the embedded
    sample, nor has DVC walk its files."""
    params = load_yaml(ROOT / "params.yaml")
    assert "  synth:\n" in render(ROOT / "params.yaml")  # the sample project reads it
    params["sources"] = {
        "ot": {"format": "traces", "path": "elsewhere/traces.jsonl", "tasks": "elsewhere/traces.jsonl"}
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert "  synth:\n" in render(tmp_path / "params.yaml")  # the planted benchmark is the sample's
    params["decontaminate"] = {"root": "benchmarks", "benchmarks": {}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    text = render(tmp_path / "params.yaml")
    assert "  synth:\n" not in text and "  ingest:\n" in text and "  code:\n" in text
    params["sources"]["sample"] = {"format": "traces", "path": "data/sample/nl2bash/traces.jsonl", "tasks": "t"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert "  synth:\n" in render(tmp_path / "params.yaml")
