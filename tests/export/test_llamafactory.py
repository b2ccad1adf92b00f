"""The SFT export as LLaMA-Factory itself reads it (0.9.5, in the training environment).

- every exported row survives LLaMA-Factory's own data pipeline (converter + supervised processor),
  in order, and its token count equals the export's `n_tokens` exactly (so none was cut);
- a smaller cutoff_len rejects the long rows at export time instead of letting the loader cut them;
- real OpenThoughts-Agent rows: the one LLaMA-Factory would drop (two user messages in a row) is
  merged and kept, or rejected with its reason;
- `tracelake train sft --backend local` runs 3 full-SFT steps of a tiny random Qwen3 on CPU.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table
from tracelake.tokens.tokenizer import load_tokenizer

from ..helpers import FIXTURES, ROOT, convert_slots, lf_config, need, run_ok, sft_slot, train_env, train_python

pytestmark = pytest.mark.train_env
LF_LOAD = ROOT / "tests" / "train_env" / "lf_load.py"
CPU = {"deepspeed": None, "bf16": False, "preprocessing_num_workers": 1}


def lf_load(config: Path, cwd: Path, tmp: Path, **overrides) -> dict:
    args = [f"{k}={json.dumps(v)}" for k, v in {**CPU, "output_dir": str(tmp / "out"), **overrides}.items()]
    text = run_ok([str(train_python()), str(LF_LOAD), str(config), *args], cwd, env=train_env(tmp))
    return json.loads(text.strip().splitlines()[-1]) if text.strip().startswith("{") else _last_json(text)


def _last_json(text: str) -> dict:
    return json.loads(next(line for line in reversed(text.splitlines()) if line.startswith("{")))


def exported_tokens(export: Path) -> list[int]:
    m = read_manifest(export)
    return [n for f in m["counts"]["files"] for n in pq.read_table(export / f)["n_tokens"].to_pylist()]


@pytest.mark.parametrize("scale", ["316", "1k"])
def test_llamafactory_keeps_every_exported_row_uncut(sample_project, tiny_model, tmp_path, scale):
    export = sample_project / "lake" / "exports" / "sft" / scale
    manifest = read_manifest(export)
    config = sample_project / "training" / "configs" / f"sft-{scale}.yaml"
    got = lf_load(config, sample_project, tmp_path, model_name_or_path=str(tiny_model))
    assert got["examples"] == manifest["counts"]["rows_out"] == manifest["tables"]["sft_rows"]["rows"]
    assert got["lengths"] == exported_tokens(export)  # same order, same length: nothing cut
    assert all(t > 0 for t in got["trained_tokens"])


def test_smaller_cutoff_rejects_long_rows_instead_of_cutting(sample_project, tiny_model, tmp_path):
    project = tmp_path / "p"
    shutil.copytree(sample_project, project, symlinks=True)
    tokens = sorted(exported_tokens(project / "lake" / "exports" / "sft" / "316"))
    cutoff = tokens[len(tokens) // 2]
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"]["sft"]["cutoff_len"] = cutoff
    # a pool the filter did not length-check (its max_tokens would otherwise be at most cutoff_len and
    # no selected row would be too long): the export is the last guard and rejects, never cuts
    params["filter"].update(max_tokens=None, count_tokens=False)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_ok([sys.executable, "-m", "stages", "export_sft", "316"], project)
    run_ok([sys.executable, "-m", "stages", "train_config"], project)
    export = project / "lake" / "exports" / "sft" / "316"
    counts = read_manifest(export)["counts"]
    assert counts["rows_out"] < 316 and counts["rejected"]["over_cutoff_len"] == 316 - counts["rows_out"]
    rejects = read_table(export, "export_rejects")
    assert set(rejects["reason"].to_pylist()) == {"over_cutoff_len"}
    config = yaml.safe_load((project / "training" / "configs" / "sft-316.yaml").read_text())
    assert config["cutoff_len"] == cutoff
    got = lf_load(
        project / "training" / "configs" / "sft-316.yaml", project, tmp_path, model_name_or_path=str(tiny_model)
    )
    assert got["examples"] == counts["rows_out"]
    assert got["lengths"] == exported_tokens(export) and max(got["lengths"]) <= cutoff


def load_rows(
    rows: list[dict], tiny_model: Path, tmp_path: Path, *, same_role: str = "merge", template: str = "qwen3"
) -> tuple[dict, list[dict], list[dict]]:
    """Convert rows with export_sft's own functions, write shards + dataset_info, load them with LLaMA-Factory."""
    table, rejects = convert_slots(rows, tokenizer=load_tokenizer(tiny_model), template=template, same_role=same_role)
    out = table.to_pylist()
    config = lf_config(table, tiny_model, tmp_path, template)
    return lf_load(config, tmp_path, tmp_path), out, rejects


@pytest.mark.parametrize("same_role,expected", [("merge", 4), ("reject", 3)])
def test_real_openthoughts_rows(tiny_model, tmp_path, same_role, expected):
    raw = json.loads(need(FIXTURES / "otagent" / "sample_raw.json").read_text())
    got, out, rejects = load_rows(
        [sft_slot(i, r["conversations"]) for i, r in enumerate(raw)], tiny_model, tmp_path, same_role=same_role
    )
    assert len(out) == expected and len(out) + len(rejects) == 4
    if same_role == "reject":
        assert [r["reason"] for r in rejects] == ["consecutive_same_role"] and rejects[0]["item_id"] == "s3"
    assert got["examples"] == expected
    assert got["lengths"] == [r["n_tokens"] for r in out]


@pytest.mark.parametrize("template", ["qwen3", "qwen3_nothink"])
def test_token_counts_match_for_system_tool_and_think_turns(tiny_model, tmp_path, template):
    """The paths the sample does not exercise: a system prompt, tool observations, thoughts, braces."""

    def m(role, content):
        return {"role": role, "content": content}

    rows = [
        sft_slot(
            0,
            [
                m("system", "You are {terse}."),
                m("user", "list files"),
                m("assistant", "<think>ls</think>ls -la"),
                m("tool", "a.txt {b}"),
                m("assistant", "done"),
            ],
        ),
        sft_slot(
            1,
            [
                m("user", "hi"),
                m("assistant", "no thought here"),
                m("tool", "x"),
                m("tool", "y"),
                m("assistant", "<think>\nlong\n</think>\n\nok"),
            ],
        ),
        sft_slot(2, [m("system", "a"), m("system", "b"), m("user", "q"), m("assistant", "")]),
    ]
    got, out, _ = load_rows(rows, tiny_model, tmp_path, template=template)
    assert got["examples"] == 3 and got["lengths"] == [r["n_tokens"] for r in out]


def test_cpu_smoke_training_through_the_launcher(sample_project, tiny_model, tmp_path):
    """`tracelake train sft --backend local`: 3 full-SFT steps, finite loss (~10 s on 2 CPU cores)."""
    out = tmp_path / "run"
    sets = {
        "model_name_or_path": str(tiny_model),
        "deepspeed": "null",
        "bf16": "false",
        "use_cpu": "true",
        "max_steps": 3,
        "save_strategy": "no",
        "logging_steps": 1,
        "output_dir": str(out),
        "preprocessing_num_workers": 1,
        "dataloader_num_workers": 0,
        "plot_loss": "false",
    }
    args = [sys.executable, "-m", "tracelake", "train", "sft", "--dataset", "316", "--backend", "local", "--gpus", "1"]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    proc = subprocess.run(
        args,
        cwd=sample_project,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **train_env(tmp_path)},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "llamafactory-cli train training/configs/sft-316.yaml" in proc.stdout
    log = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in log if "loss" in e]
    assert len(losses) == 3 and all(math.isfinite(x) and x > 0 for x in losses)
    assert log[-1]["current_steps"] == 3


def test_tokenizer_follows_the_model(sample_project, tiny_model, qwen3_tiny_model, tmp_path):
    """tokenizer.source: model with a tiny local Qwen3 on Qwen3's real tokenizer (not the sample's): the
    tokenizer stage copies the model's, the filter's pool counts, the export's counts and
    LLaMA-Factory's own loader agree on every row; the export is pre-tokenized (pretokenize: auto)
    and the generated config loads it through tokenized_path, to exactly the tensors LLaMA-Factory
    builds itself from the shards; status names the tokenizer; `train` accepts this model and
    refuses the sample's tiny model (another tokenizer) unless told to allow it."""
    from tracelake.core.lake import table_paths
    from tracelake.tokens.rendering import count_template_tokens
    from tracelake.tokens.sharegpt import to_sharegpt
    from tracelake.tokens.templates import TEMPLATES
    from tracelake.tokens.tokenizer import tokenizer_fingerprint

    project = tmp_path / "project"
    shutil.copytree(sample_project, project, symlinks=True)
    model = qwen3_tiny_model
    assert tokenizer_fingerprint(model) != tokenizer_fingerprint(project / "data" / "tokenizer")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["tokenizer"]["source"] = "model"
    params["train"]["sft"]["model"] = str(model)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_ok(["dvc", "repro", "export_sft@316", "train_config"], project)

    assert (project / "data/tokenizer/tokenizer.json").read_bytes() == (model / "tokenizer.json").read_bytes()
    assert json.loads((project / "data/tokenizer/tokenizer_source.json").read_text())["model"] == str(model)
    tok = load_tokenizer(model)
    pool = read_table(project / "lake" / "pool", "pool").select(["trajectory_id", "n_tokens"]).to_pylist()
    counts = {r["trajectory_id"]: r["n_tokens"] for r in pool}
    messages = {}
    for source in (project / "lake" / "trajectories").iterdir():
        for path in table_paths(source, "trajectories"):
            for r in pq.read_table(path, columns=["trajectory_id", "messages"]).to_pylist():
                if r["trajectory_id"] in counts:
                    messages[r["trajectory_id"]] = r["messages"]
    rows = [to_sharegpt(messages[t]) for t in counts]
    direct = count_template_tokens(tok, rows, TEMPLATES["qwen3"])  # what LF encodes (test_lf_render.py)
    assert list(counts.values()) == direct  # the filter counted with the model's tokenizer, the trained rendering

    export = project / "lake" / "exports" / "sft" / "316"
    assert read_manifest(export)["inputs"]["tokenizer"] == tokenizer_fingerprint(model)
    config_path = project / "training/configs/sft-316.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert config["tokenized_path"] == "lake/exports/sft/316/tokenized" and (export / "tokenized").is_dir()
    assert read_manifest(export)["counts"]["pretokenized"]["rows"] == len(exported_tokens(export))
    got = lf_load(config_path, project, tmp_path, model_name_or_path=str(model), ids=True)
    assert got["lengths"] == exported_tokens(export)  # LLaMA-Factory's own count of every row
    # the same config without tokenized_path: LLaMA-Factory tokenizes the shards itself, to the same tensors
    own = lf_load(config_path, project, tmp_path / "own", model_name_or_path=str(model), ids=True, tokenized_path=None)
    assert own["input_ids"] == got["input_ids"] and own["labels"] == got["labels"]
    assert got["loaded_from_tokenized_path"] and not own["loaded_from_tokenized_path"]

    status = subprocess.run([sys.executable, "-m", "tracelake", "status"], cwd=project, capture_output=True, text=True)
    assert f"tokens counted by data/tokenizer: {model}'s tokenizer (tokenizer.source: model" in status.stdout

    def dry_run(*extra: str) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "tracelake", "train", "sft", "--dataset", "316", "--dry-run", *extra]
        return subprocess.run(args, cwd=project, capture_output=True, text=True)

    ok = dry_run()
    assert ok.returncode == 0 and f"tokenizer: ok: {model}'s tokenizer counted this export" in ok.stdout
    refused = dry_run("--set", f"model_name_or_path={tiny_model}")
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert "was counted with tokenizer sha256" in refused.stderr and "--allow-tokenizer-mismatch" in refused.stderr
    allowed = dry_run("--set", f"model_name_or_path={tiny_model}", "--allow-tokenizer-mismatch")
    assert allowed.returncode == 0 and "tokenizer: MISMATCH, allowed:" in allowed.stdout
