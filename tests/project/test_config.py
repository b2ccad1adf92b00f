"""params.yaml checking: the repository's file parses; every bad value stops with BadParams, one line
naming the offending key, and a stage given a bad params.yaml exits 2 before it creates anything.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tracelake.core.errors import BadParams
from tracelake.curate.params import MixParams, SelectParams
from tracelake.params import Params, load_params, parse_params

from ..helpers import ROOT, run_capped

BASE = yaml.safe_load((ROOT / "params.yaml").read_text())


def mutated(mutate) -> dict:
    data = copy.deepcopy(BASE)
    mutate(data)
    return data


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- the repository's params.yaml ------------------------------------------------------------


def test_repo_params_parse():
    params = load_params(ROOT / "params.yaml")
    assert isinstance(params, Params)
    assert set(params.sources) == {"swesmith", "superuser", "tezos", "nl2bash"}
    assert params.select.score in params.score.scorers
    assert params.scales == {"316": 316, "1k": 1000, "3k": 3160, "10k": 10000}
    assert params.mix == MixParams(sources="all", weights={}, top_k=None)
    assert params.filter.episodes == "last" and params.filter.max_tokens == 32768
    assert params.section("mix") == {"sources": "all", "weights": {}, "top_k": None}
    assert params.section("sources")["nl2bash"]["format"] == "traces"


def test_missing_sections_take_defaults():
    params = parse_params({"sources": BASE["sources"]})
    assert params.lake == "lake"
    assert params.select == SelectParams()
    assert params.mix == MixParams()


def test_valid_alternatives_parse():
    weights = parse_params(mutated(lambda d: d["mix"].update(weights={"swesmith": 0.75, "tezos": 0.25, "nl2bash": 0})))
    assert weights.mix.weights == {"swesmith": 0.75, "tezos": 0.25, "nl2bash": 0}
    top = parse_params(mutated(lambda d: d["mix"].update(sources=["tezos", "nl2bash"], top_k=2)))
    assert top.mix.sources == ["tezos", "nl2bash"] and top.mix.top_k == 2
    imported = parse_params(
        mutated(
            lambda d: d["score"].update(
                imports={"difficulty_v1": {"path": "imports/d.parquet", "score": "d", "task": "name"}}
            )
        )
        | {"select": {"score": "difficulty_v1"}, "scales": {"1k": 1000}}
    )
    assert imported.select.score == "difficulty_v1"


# --- bad params: one line naming the key -----------------------------------------------------


def _set(*path_and_value):
    *path, last, value = path_and_value

    def mutate(data):
        node = data
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value

    return mutate


def _both(*mutations):
    def mutate(data):
        for m in mutations:
            m(data)

    return mutate


IMPORT = {"path": "imports/d.parquet", "score": "d"}

BAD = [
    ("unknown-top-level", _set("bogus", 1), "'bogus'"),
    ("unknown-filter-key", _set("filter", "min_turns", 5), "filter.min_turns"),
    ("unknown-select-key", _set("select", "foo", 1), "select.foo"),
    ("max-copies-zero", _set("select", "max_copies_per_trajectory", 0), "select.max_copies_per_trajectory"),
    ("max-copies-bool", _set("select", "max_copies_per_trajectory", True), "select.max_copies_per_trajectory"),
    ("max-copies-float", _set("select", "max_copies_per_trajectory", 2.5), "select.max_copies_per_trajectory"),
    ("copy-cap-maybe", _set("select", "copy_cap", "maybe"), "select.copy_cap must be one of strict, warn"),
    ("copy-cap-bool", _set("select", "copy_cap", False), "select.copy_cap must be one of strict, warn"),
    ("unknown-source-key", _set("sources", "tezos", "fromat", "harbor"), "sources.tezos.fromat"),
    ("scale-negative", _set("scales", "1k", -5), "scales.1k"),
    ("scale-zero", _set("scales", "1k", 0), "scales.1k"),
    ("scale-float", _set("scales", "1k", 1.5), "scales.1k"),
    ("scale-str", _set("scales", "1k", "10"), "scales.1k"),
    ("scale-bool", _set("scales", "1k", True), "scales.1k"),
    ("scale-name-dot", _set("scales", "3.16k", 3160), "scales name '3.16k'"),
    ("scales-empty", _set("scales", {}), "scales"),
    ("weights-sum", _set("mix", "weights", {"swesmith": 0.5, "tezos": 0.3}), "mix.weights must sum to 1"),
    ("weight-negative", _set("mix", "weights", {"swesmith": 1.5, "tezos": -0.5}), "mix.weights.tezos"),
    ("weight-bool", _set("mix", "weights", {"swesmith": True}), "mix.weights.swesmith"),
    ("weight-str", _set("mix", "weights", {"swesmith": "1"}), "mix.weights.swesmith"),
    ("weight-unknown-source", _set("mix", "weights", {"swesmith": 0.5, "nosuch": 0.5}), "mix.weights.nosuch"),
    (
        "weight-unmixed-source",
        _both(_set("mix", "sources", ["swesmith"]), _set("mix", "weights", {"swesmith": 0.5, "tezos": 0.5})),
        "mix.weights.tezos",
    ),
    ("weights-and-top-k", _both(_set("mix", "weights", {"swesmith": 1.0}), _set("mix", "top_k", 1)), "mix.top_k"),
    ("top-k-zero", _set("mix", "top_k", 0), "mix.top_k"),
    ("top-k-too-many", _set("mix", "top_k", 5), "mix.top_k"),
    ("top-k-too-many-listed", _both(_set("mix", "sources", ["tezos"]), _set("mix", "top_k", 2)), "mix.top_k"),
    ("top-k-bool", _set("mix", "top_k", True), "mix.top_k"),
    ("mix-sources-unknown", _set("mix", "sources", ["swesmith", "nosuch"]), "'nosuch'"),
    ("mix-sources-empty", _set("mix", "sources", []), "mix.sources"),
    ("mix-sources-str", _set("mix", "sources", "swesmith"), "mix.sources"),
    ("mix-sources-nested-list", _set("mix", "sources", [["swesmith"]]), "mix.sources"),
    ("min-assistant-turns", _set("filter", "min_assistant_turns", -1), "filter.min_assistant_turns"),
    ("max-tokens-zero", _set("filter", "max_tokens", 0), "filter.max_tokens"),
    ("max-tokens-float", _set("filter", "max_tokens", 1.5), "filter.max_tokens"),
    ("episodes", _set("filter", "episodes", "first"), "filter.episodes"),
    ("timeout-exceptions-str", _set("filter", "timeout_exceptions", "AgentTimeoutError"), "filter.timeout_exceptions"),
    ("timeout-exceptions-items", _set("filter", "timeout_exceptions", ["", 3]), "filter.timeout_exceptions"),
    ("drop-subagents-str", _set("filter", "drop_subagents", "yes"), "filter.drop_subagents"),
    ("unknown-scorer", _set("score", "scorers", ["response_length_proxy_v1", "vibes_v1"]), "'vibes_v1'"),
    ("scorer-nested-list", _set("score", "scorers", [["response_length_proxy_v1"]]), "score.scorers"),
    ("select-score-unconfigured", _set("select", "score", "difficulty_v1"), "select.score"),
    (
        "import-both",
        _set("score", "imports", {"difficulty_v1": IMPORT | {"task": "t", "task_id": "i"}}),
        "score.imports.difficulty_v1",
    ),
    ("import-neither", _set("score", "imports", {"difficulty_v1": IMPORT}), "score.imports.difficulty_v1"),
    (
        "import-unknown-key",
        _set("score", "imports", {"difficulty_v1": IMPORT | {"task": "t", "colum": "x"}}),
        "score.imports.difficulty_v1.colum",
    ),
    ("import-bad-name", _set("score", "imports", {"Difficulty": IMPORT | {"task": "t"}}), "score.imports.Difficulty"),
    (
        "import-shadows-builtin",
        _set("score", "imports", {"response_length_proxy_v1": IMPORT | {"task": "t"}}),
        "score.imports.response_length_proxy_v1",
    ),
    ("source-format", _set("sources", "tezos", "format", "csv"), "sources.tezos.format"),
    ("source-missing-path", lambda d: d["sources"]["tezos"].pop("path"), "sources.tezos.path"),
    ("source-name", _set("sources", "bad name", {"format": "harbor", "path": "p", "tasks": "t"}), "'bad name'"),
    # an option to argparse (`python -m stages ingest -rf`) and a file name too long for any file system
    ("source-name-option", _set("sources", "-rf", {"format": "harbor", "path": "p", "tasks": "t"}), "'-rf' must start"),
    (
        "source-name-long",
        _set("sources", "s" * 300, {"format": "harbor", "path": "p", "tasks": "t"}),
        "(300 characters) must",
    ),
    # dvc.yaml iterates the sources (deps ${item.tasks}): tasks is required, and the line says what to write
    (
        "source-missing-tasks",
        lambda d: d["sources"]["nl2bash"].pop("tasks"),
        "sources.nl2bash.tasks: required: its task directories or (path, task_binary) table, or, when its tasks "
        "are derived from its traces, the traces' own path (tasks: data/sample/nl2bash/traces.jsonl)",
    ),
    ("source-null-tasks", _set("sources", "nl2bash", "tasks", None), "sources.nl2bash.tasks: required"),
    ("scale-name-option", _set("scales", {"-1k": 1000}), "'-1k' must start"),
    ("vocab-size", _set("tokenizer", "vocab_size", 10), "tokenizer.vocab_size"),
    ("section-not-mapping", _set("filter", [1, 2]), "filter must be a mapping"),
    ("export-sft-unknown-key", _set("export_sft", "cutoff_len", 100), "export_sft.cutoff_len"),
    ("export-sft-same-role", _set("export_sft", "same_role", "drop"), "export_sft.same_role"),
    ("export-sft-shard-zero", _set("export_sft", "rows_per_shard", 0), "rows_per_shard"),
    ("export-rl-sources", _set("export_rl", "sources", ["nosuch"]), "export_rl.sources"),
    ("export-rl-max-turns", _set("export_rl", "max_turns", 0), "export_rl.max_turns"),
    ("export-rl-env-empty", _set("export_rl", "env_class", ""), "export_rl.env_class"),
    ("train-unknown-key", _set("train", "sft", "lr", 1e-5), "train.sft.lr"),
    ("train-lr-str", _set("train", "sft", "learning_rate", "1e-5"), "train.sft.learning_rate"),
    ("train-lr-zero", _set("train", "sft", "learning_rate", 0), "train.sft.learning_rate"),
    ("train-template", _set("train", "sft", "template", "llama3"), "train.sft.template"),
    ("train-cutoff-zero", _set("train", "sft", "cutoff_len", 0), "train.sft.cutoff_len"),
    ("train-gpus-zero", _set("train", "sft", "gpus", 0), "train.sft.gpus"),
    ("train-rl-samples", _set("train", "rl", "n_samples_per_prompt", 0), "train.rl.n_samples_per_prompt"),
    ("train-modal-unknown", _set("train", "modal", "gpu", "A100"), "train.modal.gpu"),
    # extra passes keys through, but not one `--set` may not change (export/set_keys.py)
    ("train-extra-dataset", _set("train", "sft", "extra", {"dataset_dir": "/etc"}), "train.sft.extra"),
    ("train-extra-template", _set("train", "sft", "extra", {"template": "llama3"}), "train.sft.template"),
    ("train-extra-cutoff", _set("train", "sft", "extra", {"cutoff_len": 16}), "cutoff_len"),
    ("train-rl-extra-data", _set("train", "rl", "extra", {"data.train_data": ["/etc"]}), "train.rl.extra"),
    (
        "train-rl-extra-data-map",
        _set("train", "rl", "extra", {"data": {"val_data": []}}),
        "data may not be passed through extra",
    ),
    ("train-rl-extra-prompt", _set("train", "rl", "extra", {"++trainer.max_prompt_length": 9}), "max_prompt_length"),
    ("train-not-mapping", _set("train", [1]), "train must be a mapping"),
]


@pytest.mark.parametrize(("mutate", "key"), [pytest.param(m, k, id=i) for i, m, k in BAD])
def test_bad_params_name_the_key(tmp_path, mutate, key):
    path = write(tmp_path / "params.yaml", mutated(mutate))
    with pytest.raises(BadParams) as err:
        load_params(path)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert msg.startswith("params.yaml: "), msg
    assert key in msg, msg


def test_not_yaml_and_not_found(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text("select: [unclosed\n  scales: {\n")
    with pytest.raises(BadParams, match="is not valid YAML") as err:
        load_params(bad)
    assert "\n" not in str(err.value)
    with pytest.raises(BadParams, match="not found"):
        load_params(tmp_path / "missing.yaml")
    with pytest.raises(BadParams, match="must be a mapping"):
        parse_params([1, 2])


# --- hostile files: one line, never a traceback, before any work --------------------------------


def _base_text() -> str:
    return (ROOT / "params.yaml").read_text()


def _nested_filter() -> bytes:
    return _base_text().replace("filter:\n", "filter:\n  x: " + "[" * 5000 + "]" * 5000 + "\n", 1).encode()


def _alias_bomb() -> bytes:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return ("filter:\n" + "".join(f"  {line}\n" for line in lines)).encode()


HOSTILE_FILES = [  # (id, the file's bytes, what the one line says)
    (
        "int-beyond-64-bits",
        lambda: _base_text().replace("  max_tokens: 32768", "  max_tokens: 1" + "0" * 30, 1).encode(),
        "params.yaml: filter.max_tokens is beyond a 64-bit integer",
    ),
    (
        "int-under-a-newline-key",
        lambda: _base_text().replace("\nlake: lake", '\nlake: {"\\n": 1' + "0" * 30 + "}", 1).encode(),
        "params.yaml: lake.'\\n' is beyond a 64-bit integer",
    ),
    ("non-utf8-byte", lambda: _base_text().encode().replace(b"filter:", b"filter: # \xff", 1), "not UTF-8 text"),
    ("nested-5000-deep", _nested_filter, "nested deeper than 64 levels"),
    ("alias-bomb", _alias_bomb, "values once aliases are expanded"),
    (
        "scale-of-a-trillion",
        lambda: _base_text().replace('  "316": 316\n', '  "316": 316\n  huge: 1000000000000\n', 1).encode(),
        "scales.huge must be <= 10000000",
    ),
]


@pytest.mark.parametrize(("make", "says"), [pytest.param(m, w, id=i) for i, m, w in HOSTILE_FILES])
def test_hostile_params_file_is_one_line(tmp_path, make, says):
    path = tmp_path / "params.yaml"
    path.write_bytes(make())
    with pytest.raises(BadParams) as err:
        load_params(path)
    assert "\n" not in str(err.value) and says in str(err.value), str(err.value)


@pytest.mark.parametrize(("make", "says"), [pytest.param(m, w, id=i) for i, m, w in HOSTILE_FILES])
def test_hostile_params_file_stops_the_stage_in_one_line_and_small_memory(tmp_path, make, says):
    """Through a real stage run (select reads `scales`; `filter` too; every stage reads the file):
    exit 2, one line, nothing written, well under the memory cap."""
    (tmp_path / "params.yaml").write_bytes(make())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc, peak_mb = run_capped([sys.executable, "-m", "stages", "select", "1k"], tmp_path, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]
    assert peak_mb < 512


# --- stages: the check comes before any work -------------------------------------------------

STAGE_CASES = [  # a stage checks the file's top-level keys and, whole, each section it reads
    ("unknown-top-level", _set("bogus", 1), "'bogus'", ["select", "filter"]),
    ("scale-negative", _set("scales", "1k", -5), "scales.1k", ["select"]),
    ("filter-typo", _set("filter", "sucess_only", True), "filter.sucess_only", ["filter"]),
]
STAGE_ARGS = {"select": ["1k"], "filter": []}


def run_stage_in(cwd: Path, argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "stages", *argv], cwd=cwd, capture_output=True, text=True, timeout=60, env=env
    )


@pytest.mark.parametrize(
    ("mutate", "key", "stage"),
    [pytest.param(m, k, s, id=f"{i}-{s}") for i, m, k, stages in STAGE_CASES for s in stages],
)
def test_stage_stops_before_any_work(tmp_path, mutate, key, stage):
    write(tmp_path / "params.yaml", mutated(mutate))
    proc = run_stage_in(tmp_path, [stage, *STAGE_ARGS[stage]])
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tracelake: params.yaml:"), lines[0]
    assert key in lines[0]
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_a_stage_skips_what_it_does_not_read(tmp_path):
    """filter does not read `scales`: a bad scale stops select, not filter (whose section is fine)."""
    write(tmp_path / "params.yaml", mutated(_set("scales", "1k", -5)))
    proc = run_stage_in(tmp_path, ["filter"])
    assert "scales" not in proc.stderr, proc.stderr


def test_select_stage_unknown_scale(tmp_path):
    write(tmp_path / "params.yaml", BASE)
    proc = run_stage_in(tmp_path, ["select", "2k"])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["tracelake: params.yaml: no scale '2k' under scales"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


# --- source names on the command line ---------------------------------------------------------


@pytest.mark.parametrize("name", ["-rf", "s" * 300, "_x", "a/b"])
def test_ingest_refuses_a_source_name_params_would_refuse(tmp_path, name):
    """`tracelake ingest --source NAME` checks the name by the rule of params.yaml's sources: one line
    naming it and the rule, exit 2, nothing written (not argparse's error, not `File name too long`)."""
    (tmp_path / "tasks").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "tracelake", "ingest", "tasks", "tasks", f"--source={name}", "--out", "lake"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "must start with a letter or digit" in proc.stderr, proc.stderr
    assert proc.stderr.startswith("tracelake: ingest tasks: --source '"), proc.stderr
    assert not (tmp_path / "lake").exists()
