"""Tests for tracelake.tokens.tokenizer: reproducible build, HF directory layout, exact ChatML counts."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tracelake.core.errors import BadInput, BadParams
from tracelake.tokens.token_count import count_chatml_tokens
from tracelake.tokens.tokenizer import (
    CHAT_TEMPLATE,
    SPECIAL_TOKENS,
    TOKEN_COUNT_RULE,
    build_tokenizer,
    load_tokenizer,
    render_chatml,
    tokenizer_fingerprint,
)

from ..helpers import train_python

FILES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
SRC = Path(__file__).resolve().parents[2] / "src"


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")


@pytest.fixture(scope="module")
def tok(tok_dir: Path) -> Tokenizer:
    return load_tokenizer(tok_dir)


def _n(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


# --- build ---------------------------------------------------------------------------------


def test_build_is_byte_identical_in_process_and_in_another_process(tok_dir: Path, tmp_path: Path):
    again = build_tokenizer(tmp_path / "again")
    code = (
        "import sys; from pathlib import Path; from tracelake.tokens.tokenizer import build_tokenizer;"
        " build_tokenizer(Path(sys.argv[1]))"
    )
    env = {
        **os.environ,
        "RAYON_NUM_THREADS": "4",
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "sub")], check=True, env=env)
    first = _digests(tok_dir)
    assert set(first) == FILES
    assert _digests(again) == first
    assert _digests(tmp_path / "sub") == first


def test_config_files_are_sorted_json_with_trailing_newline(tok_dir: Path):
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        text = (tok_dir / name).read_text(encoding="utf-8")
        value = json.loads(text)
        assert text == json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert (tok_dir / "tokenizer.json").read_text(encoding="utf-8").endswith("}\n")
    cfg = json.loads((tok_dir / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert cfg["eos_token"] == "<|im_end|>" and cfg["pad_token"] == "<|endoftext|>"
    assert isinstance(cfg["model_max_length"], int) and cfg["model_max_length"] > 0
    assert cfg["chat_template"] == CHAT_TEMPLATE
    smap = json.loads((tok_dir / "special_tokens_map.json").read_text())
    assert smap["additional_special_tokens"] == list(SPECIAL_TOKENS)


TRAIN_ENV_RENDER = """
import json, sys
import jinja2
template, msgs = json.loads(sys.stdin.read())
t = jinja2.Environment().from_string(template)
print(json.dumps([t.render(messages=msgs, add_generation_prompt=False), t.render(messages=msgs, add_generation_prompt=True)]))
"""


@pytest.mark.train_env
def test_chat_template_renders_chatml():
    """The template as jinja2 renders it (in the training environment, which has jinja2)."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    plain, with_prompt = _in_train_env(TRAIN_ENV_RENDER, [CHAT_TEMPLATE, msgs])
    assert plain == render_chatml(msgs)
    assert with_prompt == render_chatml(msgs) + "<|im_start|>assistant\n"


def _in_train_env(code: str, payload) -> object:
    proc = subprocess.run(
        [str(train_python()), "-c", code],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rebuild_replaces_directory_atomically_and_leaves_no_temp(tmp_path: Path):
    out = tmp_path / "t"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    build_tokenizer(out)
    assert {p.name for p in out.iterdir()} == FILES
    assert [p.name for p in tmp_path.iterdir()] == ["t"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)


def test_build_rejects_bad_params(tmp_path: Path):
    with pytest.raises(BadParams, match="vocab_size"):
        build_tokenizer(tmp_path / "small", vocab_size=100)
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadParams, match="not a directory"):
        build_tokenizer(tmp_path / "file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# --- loading -------------------------------------------------------------------------------


def test_loads_with_tokenizers_from_file_and_from_json_path(tok_dir: Path):
    a = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    b = load_tokenizer(tok_dir / "tokenizer.json")
    c = load_tokenizer(str(tok_dir))
    text = "ls -la\nThe task is done. café 🚀"
    assert a.encode(text).ids == b.encode(text).ids == c.encode(text).ids
    assert 256 + len(SPECIAL_TOKENS) < a.get_vocab_size() <= 4096


TRAIN_ENV_AUTOTOKENIZER = """
import json, sys
from transformers import AutoTokenizer
tok_dir, msgs = json.loads(sys.stdin.read())
hf = AutoTokenizer.from_pretrained(tok_dir)
text = hf.apply_chat_template(msgs, tokenize=False)
print(json.dumps({"eos": hf.eos_token, "pad": hf.pad_token, "text": text,
                  "n_ids": len(hf(text, add_special_tokens=False)["input_ids"]),
                  "with_prompt": hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)}))
"""


@pytest.mark.train_env
def test_loads_with_transformers_autotokenizer(tok_dir: Path, tok: Tokenizer):
    """transformers (the training environment's) loads the directory and renders the same ChatML."""
    msgs = [{"role": "user", "content": "run ls"}, {"role": "assistant", "content": "ok"}]
    got = _in_train_env(TRAIN_ENV_AUTOTOKENIZER, [str(tok_dir), msgs])
    assert (got["eos"], got["pad"]) == ("<|im_end|>", "<|endoftext|>")
    assert got["text"] == render_chatml(msgs)
    assert got["n_ids"] == count_chatml_tokens(tok, [msgs])[0]
    assert got["with_prompt"] == got["text"] + "<|im_start|>assistant\n"


def test_special_tokens_are_single_tokens(tok: Tokenizer):
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i
        assert tok.encode(s, add_special_tokens=False).ids == [i]
        assert tok.encode(f"a{s}b", add_special_tokens=False).ids.count(i) == 1


def test_byte_level_round_trips_any_text(tok: Tokenizer):
    text = "naïve 日本語 🚀🧪 \t tabs\r\n\x00 and zalgo z̷̢a̶l̵g̸o"
    assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text


def test_load_errors_are_one_line_and_name_the_path(tmp_path: Path):
    missing = tmp_path / "nope"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "vocab.json").write_text("{}")
    for p in (missing, empty):
        for fn in (load_tokenizer, tokenizer_fingerprint):
            with pytest.raises(BadParams) as e:
                fn(p)
            msg = str(e.value)
            assert "\n" not in msg and str(p) in msg and "tokenizer.json" in msg
            assert "fast tokenizer" in msg


def test_fingerprint_is_sha256_of_tokenizer_json_and_tracks_changes(tok_dir: Path, tmp_path: Path):
    fp = tokenizer_fingerprint(tok_dir)
    assert fp == hashlib.sha256((tok_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert fp == tokenizer_fingerprint(tok_dir / "tokenizer.json")
    copy = tmp_path / "copy"
    shutil.copytree(tok_dir, copy)
    assert tokenizer_fingerprint(copy) == fp
    data = json.loads((copy / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"][0]["content"] = "<|eot|>"
    (copy / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    assert tokenizer_fingerprint(copy) != fp
    load_tokenizer(copy)  # still a valid tokenizer, just a different one


# --- counting ------------------------------------------------------------------------------

CONV = [
    {"role": "system", "content": "You are an agent in a Linux terminal."},
    {"role": "user", "content": "List the files in /app."},
    {"role": "assistant", "content": '{"analysis": "x", "commands": [{"keystrokes": "ls\\n"}]}'},
    {"role": "tool", "content": "main.py\nREADME.md\n"},
]


def test_rule_name():
    assert TOKEN_COUNT_RULE == "chatml_tokens_v1"


def test_count_is_exact_against_hand_rendered_text(tok: Tokenizer):
    text = (
        "<|im_start|>system\nYou are an agent in a Linux terminal.<|im_end|>\n"
        "<|im_start|>user\nList the files in /app.<|im_end|>\n"
        '<|im_start|>assistant\n{"analysis": "x", "commands": [{"keystrokes": "ls\\n"}]}'
        "<|im_end|>\n"
        "<|im_start|>tool\nmain.py\nREADME.md\n<|im_end|>\n"
    )
    assert render_chatml(CONV) == text
    assert count_chatml_tokens(tok, [CONV]) == [_n(tok, text)]
    ids = tok.encode(text, add_special_tokens=False).ids
    assert ids.count(tok.token_to_id("<|im_start|>")) == ids.count(tok.token_to_id("<|im_end|>")) == 4


def test_empty_inputs(tok: Tokenizer):
    assert count_chatml_tokens(tok, []) == []
    assert count_chatml_tokens(tok, [[]]) == [0]
    empty_msg = [{"role": "user", "content": ""}]
    none_msg = [{"role": "user", "content": None}]
    want = _n(tok, "<|im_start|>user\n<|im_end|>\n")
    assert count_chatml_tokens(tok, [empty_msg, none_msg, []]) == [want, want, 0]
    assert want >= 4  # <|im_start|>, role, "\n", <|im_end|>, "\n" (role may be one token)


def test_unicode_emoji_and_very_long_content(tok: Tokenizer):
    uni = [{"role": "user", "content": "Straße → 日本語 🚀✅👩‍💻 " * 20}]
    long = [{"role": "assistant", "content": "drwxr-xr-x 2 root root 4096 app\n" * 20_000}]
    got = count_chatml_tokens(tok, [uni, long])
    assert got == [_n(tok, render_chatml(uni)), _n(tok, render_chatml(long))]
    assert got[1] > 20_000


def test_batching_does_not_change_counts(tok: Tokenizer):
    convs = [CONV[: i % 5] for i in range(23)]
    want = [_n(tok, render_chatml(c)) for c in convs]
    for bs in (1, 3, 256):
        assert count_chatml_tokens(tok, convs, batch_size=bs) == want


def test_counts_are_monotone_as_content_grows(tok: Tokenizer):
    convs = [[{"role": "user", "content": "please run the tests " * n}] for n in range(30)]
    counts = count_chatml_tokens(tok, convs)
    assert all(a < b for a, b in itertools.pairwise(counts))
    growing = [CONV[:k] for k in range(len(CONV) + 1)]
    counts = count_chatml_tokens(tok, growing)
    assert counts[0] == 0 and all(a < b for a, b in itertools.pairwise(counts))


def test_bad_messages_and_batch_size(tok: Tokenizer):
    with pytest.raises(BadInput, match="message 1"):
        count_chatml_tokens(tok, [[CONV[0], {"content": "no role"}]])
    with pytest.raises(BadInput, match="message 0"):
        count_chatml_tokens(tok, [[{"role": "user", "content": ["parts"]}]])
    with pytest.raises(BadParams, match="batch_size"):
        count_chatml_tokens(tok, [CONV], batch_size=0)
