"""A small, reproducible byte-level BPE tokenizer and ChatML token counting.

`build_tokenizer` trains a byte-level BPE on a fixed built-in corpus (shell, Python, JSON
agent turns, prose about tasks) and writes a Hugging Face style directory: `tokenizer.json`,
`tokenizer_config.json`, `special_tokens_map.json`. Same inputs give byte-identical files in
any process: the BPE trainer breaks ties on (count, pair ids) and assigns ids in merge order,
so its result does not depend on thread count or hash order (RAYON_NUM_THREADS from 1 to 32
give the same bytes; no pinning needed), and tokenizer.json lists the vocabulary by id. Our own
JSON files are written with sorted keys and a trailing newline. `train_bpe` is its trainer, for
any pre-tokenizer (the tests and benchmarks train Qwen- and Llama-style tokenizers with it).

`render_chatml` renders conversations as ChatML; tokens/token_count.py counts its tokens with any
fast tokenizer (`tokenizer.json`), ours or a real model's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tracelake.core.errors import BadInput, BadParams
from tracelake.core.stage import Streamed, write_output

TOKEN_COUNT_RULE = "chatml_tokens_v1"
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",  # ids 0..8
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"
MODEL_MAX_LENGTH = 32768
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS = (  # fixed: changing any line changes every tokenizer built from it
    "ls -la\n",
    "cd /app && git status --short\n",
    "cat README.md | head -n 20\n",
    "grep -rn 'def main' src/ --include='*.py'\n",
    "find . -name '*.log' -mtime +7 -delete\n",
    "python3 -m pytest tests/ -q -x\n",
    "pip install --no-cache-dir -r requirements.txt\n",
    "mkdir -p /tmp/build && tar -xzf archive.tar.gz -C /tmp/build\n",
    'echo $HOME; export PATH="$HOME/.local/bin:$PATH"\n',
    "curl -sSL http://localhost:8080/health || echo 'server down' >&2\n",
    "sed -i 's/foo/bar/g' config.yaml && wc -l config.yaml\n",
    'docker run --rm -v "$(pwd)":/work -w /work python:3.11 make test\n',
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)",
    "import json\nwith open('data.json') as f:\n    rows = json.load(f)\nprint(len(rows))\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
    "    def push(self, item):\n        self.items.append(item)\n",
    "for i, line in enumerate(sys.stdin):\n    if 'ERROR' in line:\n        print(i, line)\n",
    "try:\n    value = int(text)\nexcept ValueError as exc:\n    raise SystemExit(exc)\n",
    (
        '{"analysis": "The directory is empty, so the project has not been cloned yet.", '
        '"plan": "Clone the repository and list its files.", "commands": [{"keystrokes": '
        '"ls -la\\n", "duration": 0.1}], "task_complete": false}\n'
    ),
    (
        '{"analysis": "The tests pass and the output file exists.", "plan": "Finish.", '
        '"commands": [{"keystrokes": "cat out.txt\\n", "duration": 0.5}], "task_complete": true}\n'
    ),
    '{"name": "run_shell", "arguments": {"command": "python3 solve.py --input data.csv"}}\n',
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "/app/main.py"}}\n</tool_call>\n',
    (
        '<tool_response>\nTraceback (most recent call last):\n  File "main.py", line 3\n'
        "SyntaxError: invalid syntax\n</tool_response>\n"
    ),
    "<think>\nThe error says the file is missing, so I should create it first.\n</think>\n",
    "You are an agent working in a Linux terminal. Solve the task and say when you are done.\n",
    "The task is to fix the failing build. First I will read the error message carefully.\n",
    "The server must listen on port 8080 and return JSON with a status field.\n",
    "I ran the tests and two of them failed because the config file was not found.\n",
    "Write a script that counts the words in every text file and prints the ten most common.\n",
    "The output should be sorted by date, newest first, with one record per line.\n",
    "Check that the database migration ran, then restart the service and verify the logs.\n",
    "Numbers like 42, 3.14, 1e-9 and 0xFF appear in logs; dates like 2024-05-09T07:35:25Z.\n",
    "Unicode text: café, naïve, Straße, 日本語, emoji 🚀✅, arrows → ← must round-trip.\n",
    "<|im_start|>user\nPlease compress the logs.<|im_end|>\n<|im_start|>assistant\nDone.\n",
)


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def train_bpe(
    texts: Iterable[str],
    vocab_size: int,
    pre_tokenizer: pre_tokenizers.PreTokenizer | None = None,
    *,
    normalizer: normalizers.Normalizer | None = None,
    special: Sequence[str] = SPECIAL_TOKENS,
    added: Sequence[str] = (),
    min_frequency: int = 1,
) -> Tokenizer:
    """A BPE over bytes (the byte-level alphabet and decoder) trained on `texts`, pre-tokenized by
    `pre_tokenizer` (default GPT-2's byte level without a prefix space) after `normalizer`.

    `special` take the first ids, as special tokens; `added` come after the merges, as plain added
    tokens (as Qwen adds `<think>`). `vocab_size` is an upper bound.
    """
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False) if pre_tokenizer is None else pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    return tok


def build_tokenizer(out_dir: Path, vocab_size: int = 4096) -> Path:
    """Train the built-in byte-level BPE and write it as an HF tokenizer directory at `out_dir`
    (`tokenizer_output`, written whole: `out_dir` is either the old directory or the complete new
    one). Returns `out_dir`."""
    out_dir = Path(out_dir)
    write_output(tokenizer_output(out_dir, vocab_size))
    return out_dir


def tokenizer_output(out_dir: Path, vocab_size: int = 4096) -> Streamed:
    """The built-in byte-level BPE's HF tokenizer directory at `out_dir`, as a stage output (the stage
    `tokenizer` publishes it; plain files, no manifest). `vocab_size` is an upper bound: training stops
    early when the small corpus has no pairs left to merge."""
    out_dir = Path(out_dir)
    if vocab_size < len(SPECIAL_TOKENS) + 256:
        raise BadParams(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 256}: {vocab_size}")
    if out_dir.exists() and not out_dir.is_dir():
        raise BadParams(f"{out_dir} exists and is not a directory; pick another tokenizer path")

    def write(tmp: Path) -> None:
        tok = train_bpe(_CORPUS, vocab_size)
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        (tmp / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
        specials = {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN, "additional_special_tokens": list(SPECIAL_TOKENS)}
        _write_json(tmp / "special_tokens_map.json", specials)
        _write_json(
            tmp / "tokenizer_config.json",
            {
                **specials,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": None,
                "unk_token": None,
                "model_max_length": MODEL_MAX_LENGTH,
                "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False,
                "add_prefix_space": False,
            },
        )

    return Streamed(out_dir, write)


def tokenizer_file(path: Path | str) -> Path:
    p = Path(path)
    need = "a fast tokenizer is needed (a tokenizer.json file, or a directory holding one)"
    if p.is_dir():
        if not (p / "tokenizer.json").is_file():
            raise BadParams(f"tokenizer directory {p} has no tokenizer.json: {need}")
        return p / "tokenizer.json"
    if not p.is_file():
        raise BadParams(f"tokenizer path {p} does not exist: {need}")
    return p


def load_tokenizer(path: Path | str) -> Tokenizer:
    """Load a fast tokenizer from an HF tokenizer directory or a tokenizer.json file."""
    f = tokenizer_file(path)
    try:
        return Tokenizer.from_file(str(f))
    except Exception as exc:  # the Rust error is multi-line; keep the first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadParams(f"cannot load tokenizer {f}: {first}") from exc


def tokenizer_fingerprint(path: Path | str) -> str:
    """sha256 hex of the tokenizer.json bytes: names exactly which tokenizer did the counting."""
    return hashlib.sha256(tokenizer_file(path).read_bytes()).hexdigest()


def render_chatml(conversation: Sequence[Mapping[str, object]]) -> str:
    """`<|im_start|>{role}\\n{content}<|im_end|>\\n` per message, concatenated.

    A missing or None content renders as empty; a message without a string role or with
    non-string content raises BadInput.
    """
    parts = []
    for j, m in enumerate(conversation):
        role = m.get("role") if isinstance(m, Mapping) else None
        content = m.get("content") if isinstance(m, Mapping) else None
        if not isinstance(role, str) or not isinstance(content, (str, type(None))):
            raise BadInput(f"message {j} is not a {{role: str, content: str}} dict: {m!r:.60}")
        parts.append(f"<|im_start|>{role}\n{content or ''}<|im_end|>\n")
    return "".join(parts)
