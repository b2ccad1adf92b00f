"""tokenizer.source: model: a model name resolves to its tokenizer (a local directory, the HF hub
cache in its real layout, else a one-line error that says what to do), and the stage's copy says
where it came from."""

from __future__ import annotations

import json

import pytest

from tracelake.core.errors import BadParams
from tracelake.tokens.model_tokenizer import SOURCE_FILE, copy_tokenizer, describe_tokenizer, resolve
from tracelake.tokens.tokenizer import build_tokenizer, tokenizer_fingerprint


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer", vocab_size=400)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def cache_model(cache, model: str, tokenizer_dir, revision: str = "0123abcd", ref: bool = True):
    """A model in the hub cache's own layout: models--org--name/{refs/main, snapshots/<rev>/...}."""
    repo = cache / ("models--" + model.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for f in tokenizer_dir.iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
    return snapshot


def test_a_local_model_directory(tokenizer_dir, hub):
    found = resolve(str(tokenizer_dir))
    assert found.directory == tokenizer_dir and found.how == "local directory"


def test_a_local_directory_without_tokenizer_json_says_so(tmp_path, hub):
    (tmp_path / "model").mkdir()
    with pytest.raises(BadParams, match="the directory has no tokenizer.json"):
        resolve(str(tmp_path / "model"))


@pytest.mark.parametrize("ref", [True, False])
def test_the_hub_cache(tokenizer_dir, hub, ref):
    snapshot = cache_model(hub, "Qwen/Qwen3-8B", tokenizer_dir, ref=ref)
    found = resolve("Qwen/Qwen3-8B")
    assert found.directory == snapshot and found.how == "hub cache"


def test_nowhere_is_one_line_naming_the_fixes(hub):
    with pytest.raises(BadParams) as e:
        resolve("Qwen/Qwen3-8B")
    msg = str(e.value)
    assert "\n" not in msg and "HF_HUB_OFFLINE is set" in msg and str(hub) in msg
    assert "huggingface-cli download Qwen/Qwen3-8B" in msg and "tokenizer.source: builtin" in msg


def test_train_only_looks_it_never_downloads(hub, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(BadParams, match="not looked for"):
        resolve("Qwen/Qwen3-8B", download=False)


def test_the_copy_says_where_it_came_from(tokenizer_dir, hub, tmp_path):
    cache_model(hub, "org/tiny", tokenizer_dir)
    out = tmp_path / "out"
    out.mkdir()
    copied = copy_tokenizer(resolve("org/tiny"), "org/tiny", out)
    assert "tokenizer.json" in copied and tokenizer_fingerprint(out) == tokenizer_fingerprint(tokenizer_dir)
    source = json.loads((out / SOURCE_FILE).read_text())
    assert source == {
        "source": "model",
        "model": "org/tiny",
        "resolved_from": "hub cache",
        "sha256": tokenizer_fingerprint(tokenizer_dir),
        "files": copied,
    }
    assert describe_tokenizer(out).startswith("org/tiny's tokenizer (tokenizer.source: model, sha256 ")
    assert describe_tokenizer(tokenizer_dir).startswith("the project's builtin BPE")
