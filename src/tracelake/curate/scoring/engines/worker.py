"""Answer chat requests with vLLM (offline `LLM.generate`) or transformers (`generate`).

Runs in the environment that holds the engine (its own interpreter: vLLM and torch are not
tracelake's dependencies), started by tracelake.curate.scoring.engines.local; imports only the standard
library and the engine. Protocol, one JSON object per line:

    stdin   {"key", "messages", "temperature", "max_tokens", "n", "seed"}        (one per request)
    stdout  {"ready": true}                                                        (model loaded)
            {"key", "samples": [{"text", "finish_reason", "prompt_tokens", "completion_tokens"}]}
            {"key", "failure": reason, "detail"}                                   (one request)

It answers `--batch-size` requests at a time and writes each batch's answers as soon as they exist.

    python worker.py --engine vllm|transformers --model DIR [--batch-size 64] [--max-model-len N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Iterator

# The protocol owns the real stdout; everything else printed to fd 1 (engine logs, C libraries,
# the engine's own subprocesses) goes to stderr.
_PROTOCOL = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)


def batches(lines: Any, size: int) -> Iterator[list[dict]]:
    batch = []
    for line in lines:
        if line.strip():
            batch.append(json.loads(line))
            if len(batch) >= size:
                yield batch
                batch = []
    if batch:
        yield batch


def emit(message: dict) -> None:
    _PROTOCOL.write(json.dumps(message, ensure_ascii=False) + "\n")
    _PROTOCOL.flush()


def run_vllm(model: str, batch_size: int, max_model_len: int | None) -> None:
    from vllm import LLM, SamplingParams

    kwargs: dict[str, Any] = {"model": model, "enforce_eager": True}
    if max_model_len:
        kwargs["max_model_len"] = max_model_len
    llm = LLM(**kwargs)
    tokenizer = llm.get_tokenizer()
    emit({"ready": True})
    for batch in batches(sys.stdin, batch_size):
        prompts, params = [], []
        for r in batch:
            prompts.append(tokenizer.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True))
            params.append(
                SamplingParams(
                    n=r["n"],
                    max_tokens=r["max_tokens"],
                    seed=r["seed"],
                    temperature=1.0 if r["temperature"] is None else r["temperature"],
                )
            )
        outputs = llm.generate(prompts, params, use_tqdm=False)
        for r, out in zip(batch, outputs):
            emit(
                {
                    "key": r["key"],
                    "samples": [
                        {
                            "text": c.text,
                            "finish_reason": c.finish_reason,
                            "prompt_tokens": len(out.prompt_token_ids),
                            "completion_tokens": len(c.token_ids),
                        }
                        for c in out.outputs
                    ],
                }
            )


def run_transformers(model: str, batch_size: int, max_model_len: int | None) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lm = AutoModelForCausalLM.from_pretrained(model, dtype="auto").to(device).eval()
    eos = tokenizer.eos_token_id
    emit({"ready": True})
    for batch in batches(sys.stdin, batch_size):
        for r in batch:  # one request at a time: its answers depend on its own seed only
            ids = tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True, return_tensors="pt")
            if not isinstance(ids, torch.Tensor):  # transformers 5 returns a BatchEncoding
                ids = ids["input_ids"]
            if max_model_len and ids.shape[1] + r["max_tokens"] > max_model_len:
                emit(
                    {
                        "key": r["key"],
                        "failure": "prompt_too_long",
                        "detail": f"{ids.shape[1]} prompt tokens + max_tokens {r['max_tokens']} > {max_model_len}",
                    }
                )
                continue
            ids = ids.to(device)
            if r["seed"] is not None:
                torch.manual_seed(r["seed"])
            temperature = 1.0 if r["temperature"] is None else r["temperature"]
            sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
            with torch.no_grad():
                out = lm.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=r["max_tokens"],
                    num_return_sequences=r["n"],
                    pad_token_id=tokenizer.pad_token_id or eos,
                    **sampling,
                )
            samples = []
            for seq in out[:, ids.shape[1] :].tolist():
                if eos is not None and eos in seq:
                    seq, reason = seq[: seq.index(eos)], "stop"
                else:
                    reason = "length" if len(seq) >= r["max_tokens"] else "stop"
                samples.append(
                    {
                        "text": tokenizer.decode(seq, skip_special_tokens=True),
                        "finish_reason": reason,
                        "prompt_tokens": int(ids.shape[1]),
                        "completion_tokens": len(seq),
                    }
                )
            emit({"key": r["key"], "samples": samples})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["vllm", "transformers"], required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=None)
    args = parser.parse_args()
    run = run_vllm if args.engine == "vllm" else run_transformers
    run(args.model, args.batch_size, args.max_model_len)


if __name__ == "__main__":
    main()
