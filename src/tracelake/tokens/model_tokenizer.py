"""The tokenizer of the model a dataset trains (`tokenizer.source: model`): token counts must come
from the tokenizer LLaMA-Factory and SkyRL will use, not from a stand-in.

A model name resolves, in order, to:
  1. a local model directory holding tokenizer.json (`train.sft.model: /models/qwen3-8b`);
  2. the Hugging Face hub cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub):
     models--<org>--<name>/snapshots/<refs/main>/tokenizer.json, as `huggingface-cli download` and
     transformers leave it;
  3. a download of the tokenizer files alone, where the hub is reachable (never with HF_HUB_OFFLINE=1;
     `download=False` skips it: `tracelake train` only looks).
Otherwise a one-line error says what to do. The stage `tokenizer` copies the files it finds into
`tokenizer.out`, with `tokenizer_source.json` saying where they came from (SOURCE_FILE), so every
stage that counts reads one directory that DVC tracks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tracelake.core.errors import BadParams
from tracelake.tokens.tokenizer import tokenizer_fingerprint

# What a tokenizer directory may hold (transformers' AutoTokenizer files); tokenizer.json is required.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
SOURCE_FILE = "tokenizer_source.json"  # written beside the files by the stage: where they came from


@dataclass(frozen=True)
class Resolved:
    directory: Path  # holds tokenizer.json
    how: str  # local directory | hub cache | hub download


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _cached(model: str) -> Path | None:
    repo = hub_cache() / ("models--" + model.replace("/", "--"))
    ref = repo / "refs" / "main"
    snapshots = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else []
    if not snapshots and (repo / "snapshots").is_dir():  # a cache filled by revision, without refs/main
        snapshots = sorted((repo / "snapshots").iterdir())
    return next((s for s in snapshots if (s / "tokenizer.json").is_file()), None)


def _download(model: str) -> tuple[Path | None, str]:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return None, "HF_HUB_OFFLINE is set"
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None, "huggingface_hub is not installed"
    try:
        path = snapshot_download(model, allow_patterns=list(TOKENIZER_FILES), etag_timeout=10)
    except Exception as exc:  # noqa: BLE001 - any hub failure (network, auth, no such repo) becomes the reason
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"the hub download failed ({type(exc).__name__}: {first[:200]})"
    return (Path(path), "") if (Path(path) / "tokenizer.json").is_file() else (None, "the repo has no tokenizer.json")


def resolve(model: str, *, download: bool = True, what: str = "train.sft.model") -> Resolved:
    """The directory holding `model`'s tokenizer.json (see the module docstring), or BadParams."""
    local = Path(model).expanduser()
    if local.is_dir():
        if (local / "tokenizer.json").is_file():
            return Resolved(local, "local directory")
        raise BadParams(f"{what} {model}: the directory has no tokenizer.json (a fast tokenizer is needed)")
    cached = _cached(model)
    if cached is not None:
        return Resolved(cached, "hub cache")
    why = "not looked for (train only looks in the cache)"
    if download:
        fetched, why = _download(model)
        if fetched is not None:
            return Resolved(fetched, "hub download")
    raise BadParams(
        f"tokenizer.source: model: no tokenizer for {what} {model!r}: not a local directory, not in the hub "
        f"cache ({hub_cache()}), and {why}; set {what} to a local model directory, run `huggingface-cli "
        f"download {model} --include 'tokenizer*'` where the hub is reachable, or set tokenizer.source: builtin"
    )


def copy_tokenizer(resolved: Resolved, model: str, out: Path) -> list[str]:
    """The tokenizer files of `resolved` into the (new, empty) directory `out`, with SOURCE_FILE;
    returns the files copied."""
    copied = []
    for name in TOKENIZER_FILES:
        src = resolved.directory / name
        if src.is_file():
            (out / name).write_bytes(src.read_bytes())
            copied.append(name)
    source = {
        "source": "model",
        "model": model,
        "resolved_from": resolved.how,
        "sha256": tokenizer_fingerprint(out),
        "files": copied,
    }
    (out / SOURCE_FILE).write_text(json.dumps(source, indent=2, sort_keys=True) + "\n")
    return copied


def describe_tokenizer(directory: Path | str) -> str:
    """Which tokenizer a directory the stage `tokenizer` wrote holds, in a few words: a model's (its
    SOURCE_FILE names it) or the project's builtin BPE."""
    d = Path(directory)
    try:
        digest = tokenizer_fingerprint(d)[:12]
    except BadParams:
        return f"{d} (missing)"
    meta = d / SOURCE_FILE
    if meta.is_file():
        source = json.loads(meta.read_text())
        return f"{source.get('model')}'s tokenizer (tokenizer.source: model, sha256 {digest})"
    return f"the project's builtin BPE (tokenizer.source: builtin, sha256 {digest}), not a model's"
