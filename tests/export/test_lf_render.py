"""render_segments is LLaMA-Factory 0.9.5's own rendering (in the training environment), in every
training mode (templates.MODES, and mask_history with enable_thinking false).

For every row of the sample project's SFT export (scale 316, in order), and for hand-made rows with
what the sample lacks (a system prompt, tool observations, thoughts of every shape, braces, an empty
answer) under both templates, LLaMA-Factory's own data pipeline (get_dataset: converter +
supervised processor, with the mode's mask_history / enable_thinking / train_on_prompt /
preserve_thinking) gives input_ids and labels; the model's tokenizer encoding each of
render_segments' pieces on its own, concatenated, gives the same input_ids, and the trained pieces'
tokens are exactly the positions whose label is not -100 (and there the label is the input id);
trained_tokens is their number.

The model is a tiny random Qwen3 over Qwen3's real tokenizer (../shared/fixtures/qwen3-tokenizer,
the conftest's qwen3_tiny_model): LLaMA-Factory and the pieces are tokenized by it. The sample
export's own counts (its manifest) were made with the sample's builtin tokenizer: they are checked
against the same rendering recounted with that tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from tokenizers import Tokenizer

from tracelake.core.outputs import read_manifest
from tracelake.export.sft import dataset_info_v1
from tracelake.tokens.rendering import count_trained_tokens
from tracelake.tokens.sharegpt import SharegptRow
from tracelake.tokens.templates import (
    MODES,
    LfMode,
    TemplateSlots,
    render_segments,
    template_slots,
    trained_tokens,
)
from tracelake.tokens.tokenizer import load_tokenizer

from ..helpers import convert_slots, lf_config, run_ok, sft_slot, train_env, train_python

pytestmark = pytest.mark.train_env
IGNORE_INDEX = -100

# Every v0 mode checked: MODES and one combination LF allows (mask_history with enable_thinking false);
# the v1 data engine (MODES["v1"]) is checked against LF's v1 code below.
CHECKED = [
    *(m for m in MODES.values() if not m.v1),
    LfMode("mask_history_no_thinking", mask_history=True, enable_thinking=False),
]
V1 = MODES["v1"]

# Runs in the training environment: for each mode, load CONFIG's dataset as `llamafactory-cli train
# CONFIG` with the mode's arguments would, and write every example's input_ids and labels to OUT as
# JSON, by mode name.
LF_DUMP = """
import json, sys
import yaml
from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
from llamafactory.hparams import get_train_args
from llamafactory.model import load_tokenizer

config, out, overrides, modes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
result = {}
for name, mode_args in modes.items():
    args = {**yaml.safe_load(open(config)), **overrides, **mode_args, "overwrite_cache": True}
    model_args, data_args, training_args, _, _ = get_train_args(args)
    assert {k: getattr(data_args, k) for k in mode_args} == mode_args, name
    tokenizer_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tokenizer_module["tokenizer"], data_args)
    ds = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer_module)["train_dataset"]
    result[name] = {"input_ids": [list(x) for x in ds["input_ids"]], "labels": [list(x) for x in ds["labels"]]}
json.dump(result, open(out, "w"))
"""

# Runs in the training environment: LLaMA-Factory v1's own data path, as `USE_V1=1 llamafactory-cli sft`
# feeds its trainer (DataEngine over a v1 dataset_info.yaml with the sharegpt converter, the Renderer
# of TEMPLATE as the DataLoader's collate_fn, pad_and_truncate at CUTOFF), for every row in order.
LF_V1_DUMP = """
import json, sys
from transformers import AutoProcessor
from llamafactory.v1.core.data_engine import DataEngine
from llamafactory.v1.core.utils.rendering import Renderer
from llamafactory.v1.utils.helper import pad_and_truncate

info, model, template, cutoffs, out = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]
engine = DataEngine(info)
renderer = Renderer(template, AutoProcessor.from_pretrained(model))
result = {str(c): {"input_ids": [], "labels": [], "samples_per_row": []} for c in cutoffs}
for i in range(len(engine)):
    samples = renderer.process_samples([engine[i]])
    for c in cutoffs:
        r = result[str(c)]
        r["samples_per_row"].append(len(samples))
        for batch in pad_and_truncate(samples, c):
            r["input_ids"].append(batch["input_ids"].tolist())
            r["labels"].append(batch["labels"].tolist())
json.dump(result, open(out, "w"))
"""


def lf_examples(config: Path, cwd: Path, tmp: Path, **overrides) -> dict[str, dict[str, list[list[int]]]]:
    """LF's input_ids and labels for CONFIG's dataset in each CHECKED mode, by mode name."""
    script, out = tmp / "lf_dump.py", tmp / "examples.json"
    script.write_text(LF_DUMP)
    overrides = {
        "deepspeed": None,
        "bf16": False,
        "preprocessing_num_workers": 1,
        "output_dir": str(tmp / "out"),
        **overrides,
    }
    modes = {mode.name: mode.lf_args() for mode in CHECKED}
    run_ok(
        [str(train_python()), str(script), str(config), str(out), json.dumps(overrides), json.dumps(modes)],
        cwd,
        env=train_env(tmp),
    )
    return json.loads(out.read_text())


def lf_v1_examples(
    info: Path, model: Path, template: str, cutoffs: list[int], cwd: Path, tmp: Path
) -> dict[int, dict[str, list]]:
    """LF v1's input_ids and labels (and samples per row) for a v1 dataset_info.yaml, by cutoff_len."""
    script, out = tmp / "lf_v1_dump.py", tmp / "v1.json"
    script.write_text(LF_V1_DUMP)
    env = {"HF_DATASETS_CACHE": str(tmp / "hf-datasets"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    run_ok(
        [str(train_python()), str(script), str(info), str(model), template, json.dumps(cutoffs), str(out)], cwd, env=env
    )
    return {int(c): v for c, v in json.loads(out.read_text()).items()}


def exported_rows(export: Path) -> list[SharegptRow]:
    files = read_manifest(export)["counts"]["files"]
    return [
        SharegptRow(r["system"] or "", r["conversations"], 0, 0)
        for f in files
        for r in pq.read_table(export / f, columns=["system", "conversations"]).to_pylist()
    ]


def assert_same_rendering(
    rows: list[SharegptRow],
    got: dict[str, list[list[int]]],
    tokenizer: Tokenizer,
    template: TemplateSlots,
    mode: LfMode,
    cutoff_len: int | None = None,
) -> tuple[set[tuple[str, bool]], int]:
    """Each row's segments in `mode`, encoded one by one (and cut at cutoff_len: v1), are LF's
    input_ids, the trained ones its labels, and trained_tokens counts them; the (role, trained)
    pairs seen and the trained tokens. v1 must have made exactly one sample per row."""
    assert len(got["input_ids"]) == len(got["labels"]) == len(rows)
    if mode.v1:
        assert got["samples_per_row"] == [1] * len(rows)
    roles: set[tuple[str, bool]] = set()
    total = 0
    where = mode.name + (f" cutoff {cutoff_len}" if cutoff_len else "")

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    for k, (row, input_ids, labels) in enumerate(zip(rows, got["input_ids"], got["labels"])):
        ids: list[int] = []
        trained: list[bool] = []
        for segment in render_segments(row, template, mode):
            encoded = tokenizer.encode(segment.text, add_special_tokens=False).ids
            ids += encoded
            trained += [segment.trained] * len(encoded)
            roles.add((segment.role, segment.trained))
        if cutoff_len is not None:
            ids, trained = ids[:cutoff_len], trained[:cutoff_len]
        assert ids == input_ids, f"{where}, row {k}: input_ids differ"
        assert trained == [label != IGNORE_INDEX for label in labels], f"{where}, row {k}: trained positions differ"
        assert all(label == i for label, i in zip(labels, input_ids) if label != IGNORE_INDEX), f"{where}, row {k}"
        assert trained_tokens(row, template, mode, count, cutoff_len) == sum(trained)
        total += sum(trained)
    return roles, total


def test_render_segments_is_llamafactorys_rendering(sample_project, qwen3_tiny_model, tmp_path):
    scale = "316"
    config = sample_project / "training" / "configs" / f"sft-{scale}.yaml"
    template_name = yaml.safe_load(config.read_text())["template"]
    template = template_slots(template_name)
    rows = exported_rows(sample_project / "lake" / "exports" / "sft" / scale)
    assert len(rows) >= 50
    tiny_model = qwen3_tiny_model
    got = lf_examples(config, sample_project, tmp_path, model_name_or_path=str(tiny_model))
    tokenizer = load_tokenizer(tiny_model)  # Qwen3's
    assert tokenizer.get_vocab_size() == 151_669
    totals = {}
    for mode in CHECKED:
        roles, totals[mode.name] = assert_same_rendering(rows, got[mode.name], tokenizer, template, mode)
        assert {"human", "gpt"} <= {role for role, _ in roles}
    # LLaMA-Factory v1 over the export's own dataset_info.yaml (relative paths, from the project root),
    # at the export's cutoff_len and at a small one that cuts most rows
    export = sample_project / "lake" / "exports" / "sft" / scale
    cutoff_len = read_manifest(export)["params"]["cutoff_len"]
    v1 = lf_v1_examples(
        export / "dataset_info.yaml", tiny_model, template_name, [cutoff_len, 256], sample_project, tmp_path
    )
    for cutoff in (cutoff_len, 256):
        _, totals[f"v1@{cutoff}"] = assert_same_rendering(rows, v1[cutoff], tokenizer, template, V1, cutoff)
    totals["v1"] = totals.pop(f"v1@{cutoff_len}")
    assert totals["v1@256"] < totals["v1"]
    assert count_trained_tokens(tokenizer, rows, template, V1, 256) == [
        sum(label != IGNORE_INDEX for label in labels) for labels in v1[256]["labels"]
    ]
    print("trained tokens by mode:", json.dumps(totals))
    assert (
        totals["mask_history"]
        <= totals["mask_history_preserve_thinking"]
        <= totals["default"]
        < totals["train_on_prompt"]
    )
    # the export's manifest sums each mode's trained tokens over its rows, counted with the sample's
    # own (builtin) tokenizer: the same rendering's trained pieces, recounted with it
    builtin = load_tokenizer(sample_project / "data" / "tokenizer")
    manifest = json.loads((sample_project / "lake" / "exports" / "sft" / scale / "manifest.json").read_text())
    assert manifest["counts"]["trained_tokens"] == {
        name: sum(count_trained_tokens(builtin, rows, template, mode, cutoff_len)) for name, mode in MODES.items()
    }


def m(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


SLOTS = [  # the paths the sample does not exercise
    [
        m("system", "You are {terse}."),
        m("user", "list files"),
        m("assistant", "<think>ls</think>ls -la"),
        m("tool", "a.txt {b}"),
        m("assistant", "done"),
    ],
    [
        m("user", "hi"),
        m("assistant", "no thought here"),
        m("tool", "x"),
        m("tool", "y"),
        m("assistant", "<think>\nlong\n</think>\n\nok"),
    ],
    [m("system", "a"), m("system", "b"), m("user", "q"), m("assistant", "")],
    [m("user", "only a closing tag"), m("assistant", "x\n</think>\n\ny"), m("user", "again"), m("assistant", "z")],
    # thoughts of every shape in history turns and in the last one (what no_thinking / mask_history remove)
    [
        m("user", "a"),
        m("assistant", "<think>\nfirst\n</think>\n\n<think>\nsecond\n</think>\n\nboth gone"),
        m("user", "b"),
        m("assistant", "\n\nleading newlines, no thought"),
        m("user", "c"),
        m("assistant", "before <think>\nmid\n</think>\n\nafter"),
        m("user", "d"),
        m("assistant", "<think>\n\n</think>\n\nan empty thought written out"),
        m("user", "e"),
        m("assistant", "<think>\nkept only\nin some modes\n</think>\n\nlast"),
    ],
    [m("system", "s"), m("user", "one turn"), m("assistant", "<think>\nx\n</think>\n\ny")],
    [m("user", "unclosed"), m("assistant", "<think>\nnever closed"), m("user", "next"), m("assistant", "\nend")],
]


@pytest.mark.parametrize("name", ["qwen3", "qwen3_nothink"])
def test_render_segments_for_system_tool_and_think_turns(qwen3_tiny_model, tmp_path, name):
    tiny_model = qwen3_tiny_model
    template = template_slots(name)
    slots = [sft_slot(i, messages) for i, messages in enumerate(SLOTS)]
    table, rejects = convert_slots(slots, tokenizer=load_tokenizer(tiny_model), template=name)
    assert not rejects and table.num_rows == len(SLOTS)
    config = lf_config(table, tiny_model, tmp_path, name, rows_per_shard=len(SLOTS))
    rows = [SharegptRow(r["system"] or "", r["conversations"], 0, 0) for r in table.to_pylist()]
    got = lf_examples(config, tmp_path, tmp_path)
    for mode in CHECKED:
        roles, _ = assert_same_rendering(rows, got[mode.name], load_tokenizer(tiny_model), template, mode)
        assert {"system", "human", "observation", "gpt"} <= {role for role, _ in roles}
        assert any(role == "empty_thought" for role, _ in roles) == (name == "qwen3")
        assert (("gpt", False) in roles) == mode.mask_history
        assert (("human", True) in roles) == mode.train_on_prompt
        if name == "qwen3":  # with thinking off LF puts the empty thought in the prompt: trained only with it
            assert ("empty_thought", False) in roles or mode.enable_thinking or mode.train_on_prompt
    # LLaMA-Factory v1 on the same rows (its sharegpt converter drops the system column: no system piece)
    info = tmp_path / "v1.yaml"
    info.write_text(dataset_info_v1("d", tmp_path / "data", [f"train-{i:05d}.parquet" for i in range(1)], 3))
    got_v1 = lf_v1_examples(info, tiny_model, name, [1_000_000, 40], tmp_path, tmp_path)
    for cutoff in (1_000_000, 40):
        roles, _ = assert_same_rendering(rows, got_v1[cutoff], load_tokenizer(tiny_model), template, V1, cutoff)
        assert roles == {("human", False), ("observation", False), ("gpt", True)}
