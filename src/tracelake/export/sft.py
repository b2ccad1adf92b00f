"""One scale's selection -> LLaMA-Factory SFT shards: the rows (sharegpt_v1), their rejects and the
dataset_info.json that names the dataset by its content id.

    lake/exports/sft/<scale>/
      dataset_info.json        entries: <id> (every shard) and <id>.NNNNN (one shard each, in order)
      <id>/train-00000.parquet  sharegpt shards only (LLaMA-Factory refuses mixed file types)
      export_rejects.parquet   the slots that could not become examples, with reasons
      manifest.json            written last

Row order: the trajectories tables are streamed once, in file order, and each selected rollout
gives all its slots there (copies in selection order), so memory holds one batch of messages, never
the dataset (a sorted join of 100K slots with their messages held 1.7 GB). LLaMA-Factory lists a
dataset directory with os.listdir (unsorted), so the generated training config names the per-shard
entries in order: the example order is the same on every machine (the trainer then shuffles).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from tracelake.core.errors import BadInput, check
from tracelake.core.ids import dataset_id
from tracelake.core.lake import (
    ShardWriter,
    TableWriter,
    output_dir,
    read_manifest,
    read_table,
    write_json,
    write_manifest,
)
from tracelake.core.layout import Lake
from tracelake.core.schema import load_schema
from tracelake.core.token_count import TokenCounter
from tracelake.core.tokens import tokenizer_fingerprint
from tracelake.core.ui import progress
from tracelake.export.params import ExportSftParams, SftTrainParams
from tracelake.export.sharegpt import (
    SHAREGPT_RULE,
    ExportReject,
    SharegptRow,
    dataset_info_entry,
    to_sharegpt,
)
from tracelake.export.templates import TemplateSlots, template_slots

TOKEN_RULE = "lf_template_tokens_v1"


def count_template_tokens(tokenizer: Tokenizer | TokenCounter, rows: list[SharegptRow],
                          template: TemplateSlots) -> list[int]:
    """Tokens LLaMA-Factory 0.9.5's supervised processor gives each row (rule lf_template_tokens_v1).

    It encodes every message's formatted text on its own (the system block separately from the first
    turn) and prepends an empty thought to each gpt turn without one (qwen3). Summing encodings of
    the same pieces gives its exact length, so `n_tokens <= cutoff_len` means nothing is cut. A
    TokenCounter encodes each distinct segment once (and remembers it across runs in its cache).
    """
    counter = TokenCounter.of(tokenizer)
    pieces: list[str] = []
    owner: list[int] = []
    extra = [0] * len(rows)
    thought = counter.count([template.empty_thought])[0] if template.empty_thought else 0
    for k, row in enumerate(rows):
        if row.system:
            pieces.append(template.system.format(row.system))
            owner.append(k)
        for turn in row.conversations:
            slot = getattr(template, turn["from"])
            pieces.append(slot.format(turn["value"]))
            owner.append(k)
            if turn["from"] == "gpt" and thought and "<think>" not in turn["value"] and "</think>" not in turn["value"]:
                extra[k] += thought
    counts = list(extra)
    for k, n in zip(owner, counter.count(pieces)):
        counts[k] += n
    return counts


@dataclass
class SftStats:
    rows_in: int = 0
    rows_out: int = 0
    rejected: Counter = field(default_factory=Counter)
    rows_merged: int = 0          # examples with at least one merged message
    messages_merged: int = 0
    rows_trimmed: int = 0         # examples whose trailing prompt-side messages were removed
    messages_trimmed: int = 0
    max_tokens: int = 0
    length_checked: bool = True   # False: tokens not counted, rows over cutoff_len not rejected
    token_counts: str = ""        # what counting encoded (printed, not in metrics: it depends on the cache)

    def as_json(self) -> dict[str, Any]:
        return {"rows_in": self.rows_in, "rows_out": self.rows_out, "length_checked": self.length_checked,
                "rejected": dict(sorted(self.rejected.items())), "rows_merged": self.rows_merged,
                "messages_merged": self.messages_merged, "rows_trimmed": self.rows_trimmed,
                "messages_trimmed": self.messages_trimmed, "max_tokens": self.max_tokens}


def slots_with_messages(slots: list[dict[str, Any]], trajectory_files: list[str],
                        batch_size: int = 256) -> Iterator[list[dict[str, Any]]]:
    """Selection slots joined with their trajectory's `messages`, streamed in trajectory-file order.

    Raises BadInput after the scan when a selected trajectory is not in the files (a stale selection).
    """
    by_id: dict[str, list[dict[str, Any]]] = {}
    for slot in slots:
        by_id.setdefault(slot["trajectory_id"], []).append(slot)
    needed = pa.array(list(by_id), pa.string())
    found = 0
    for path in trajectory_files:
        # pre_buffer off: with it, pyarrow keeps what it read ahead, and memory grew with the file
        # (2.9 GB exporting 85K of 100K real-sized rows; 290 MB without)
        for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size, columns=["trajectory_id", "messages"]):
            batch = batch.filter(pc.is_in(batch.column("trajectory_id"), value_set=needed))
            rows = [{**slot, "messages": t["messages"]} for t in batch.to_pylist() for slot in by_id[t["trajectory_id"]]]
            found += batch.num_rows
            if rows:
                yield rows
    if found != len(by_id):
        raise BadInput(f"{len(by_id) - found} selected trajectories are not in the trajectories tables "
                       f"(a stale selection: run `dvc repro`)")


def convert_batch(rows: Iterable[dict[str, Any]], *, same_role: str, cutoff_len: int | None,
                  tokenizer: Tokenizer | TokenCounter | None, template: TemplateSlots, stats: SftStats) -> tuple[list[dict], list[dict]]:
    """Selection rows joined with their trajectory's `messages` -> (sft_rows, export_rejects).

    Every input row ends in exactly one of the two lists (in = out + rejected). Tokens are counted
    once per rollout in the batch, however many upsampled copies it has there; with tokenizer None
    they are not counted at all (n_tokens null, nothing rejected for length).
    """
    converted: list[tuple[dict, SharegptRow]] = []
    rejects: list[dict] = []
    for r in rows:
        stats.rows_in += 1
        try:
            converted.append((r, to_sharegpt(r["messages"], same_role)))
        except ExportReject as e:
            rejects.append(_reject(r, e.reason, e.detail))
    unique = {r["trajectory_id"]: sg for r, sg in converted}
    if tokenizer is None:
        stats.length_checked = False
        tokens = dict.fromkeys(unique)
    else:
        tokens = dict(zip(unique, count_template_tokens(tokenizer, list(unique.values()), template)))
    counts = [tokens[r["trajectory_id"]] for r, _ in converted]
    out: list[dict] = []
    for (r, sg), n_tokens in zip(converted, counts):
        if n_tokens is not None and cutoff_len is not None and n_tokens > cutoff_len:
            rejects.append(_reject(r, "over_cutoff_len", f"{n_tokens} tokens > cutoff_len {cutoff_len} "
                                   f"(LLaMA-Factory would cut it silently)"))
            continue
        stats.rows_merged += sg.merged > 0
        stats.messages_merged += sg.merged
        stats.rows_trimmed += sg.trimmed > 0
        stats.messages_trimmed += sg.trimmed
        stats.max_tokens = max(stats.max_tokens, n_tokens or 0)
        out.append({"id": f"{r['source']}/{r['name']}", "conversations": sg.conversations, "system": sg.system,
                    "slot_id": r["slot_id"], "trajectory_id": r["trajectory_id"], "task_id": r["task_id"],
                    "source": r["source"], "task": r["task"], "copy": r["copy"], "n_tokens": n_tokens})
    for rej in rejects:
        stats.rejected[rej["reason"]] += 1
    stats.rows_out += len(out)
    return out, rejects


def _reject(r: dict[str, Any], reason: str, detail: str) -> dict[str, Any]:
    return {"item_id": r["slot_id"], "trajectory_id": r["trajectory_id"], "source": r["source"],
            "name": r["name"], "reason": reason, "detail": detail}


def shard_entry_name(dataset_id: str, index: int) -> str:
    return f"{dataset_id}.{index:05d}"


def dataset_info(dataset_id: str, shard_files: list[str]) -> dict[str, Any]:
    """dataset_info.json: the whole dataset under its content id, and one entry per shard in order."""
    info = {dataset_id: dataset_info_entry(dataset_id)}
    for i, f in enumerate(shard_files):
        info[shard_entry_name(dataset_id, i)] = dataset_info_entry(f"{dataset_id}/{f}")
    return info


BATCH = 256


def export_sft(lake: Lake, scale: str, sources: list[str], cfg: ExportSftParams, sft: SftTrainParams,
               params: dict[str, Any], token_cache: Path | None = None) -> dict[str, Any]:
    """One scale's selection -> <lake>/exports/sft/<scale>/ (shards, dataset_info.json, rejects,
    manifest). Returns the counts the manifest records (dataset id, shards, in/out/rejected, ...) and
    `token_counts`, a line saying what counting encoded (it depends on the cache: not a metric).
    `token_cache`: the segment token count cache (params tokenizer.cache), or None."""
    sel_dir = lake.selection(scale)
    selection = read_manifest(sel_dir)
    slots = read_table(sel_dir, "selection").drop_columns(["score"]).to_pylist()
    trajectory_files = lake.table_files("trajectories", sources)
    tokenizer = TokenCounter.open(cfg.tokenizer, token_cache) if cfg.count_tokens else None
    template = template_slots(sft.template)
    stats = SftStats()
    total = selection["tables"]["selection"]["rows"]
    with output_dir(lake.sft_export(scale)) as tmp:
        shards = ShardWriter(tmp / "shards", load_schema("sft_rows"), cfg.rows_per_shard)
        rejects = TableWriter(tmp, load_schema("export_rejects"))
        with progress(f"export_sft {scale}") as (set_total, advance):
            set_total(total)
            for batch in slots_with_messages(slots, trajectory_files, BATCH):
                rows, rejected = convert_batch(batch, same_role=cfg.same_role, cutoff_len=sft.cutoff_len,
                                               tokenizer=tokenizer, template=template, stats=stats)
                for row in rows:
                    shards.write(row)
                for row in rejected:
                    rejects.write(row)
                advance(len(batch))
        info, reject_info = shards.close(), rejects.close()
        if tokenizer is not None:
            tokenizer.close()
            stats.token_counts = tokenizer.stats.summary()
        check(stats.rows_in == stats.rows_out + sum(stats.rejected.values()) == total,
              f"export_sft accounting: {total} slots, {stats.as_json()}")
        if not info.rows:
            raise BadInput(f"export_sft {scale}: every one of {total} rows was rejected "
                           f"({', '.join(f'{k} {v}' for k, v in sorted(stats.rejected.items()))})")
        name = dataset_id("sft", selection["params"]["rows"], info.version_id)
        (tmp / "shards").rename(tmp / name)
        write_json(tmp / "dataset_info.json", dataset_info(name, shards.files))
        counts = {"dataset_id": name, "shards": len(shards.files), **stats.as_json()}
        write_manifest(
            tmp, kind="export_sft", dataset_id=name,
            tables=[info.with_file(f"{name}/"), reject_info],
            inputs={"selection": selection["version_id"], "selection_dataset": selection["dataset_id"],
                    "tokenizer": tokenizer_fingerprint(cfg.tokenizer) if cfg.count_tokens else None},
            params=params, formulas={"rows": SHAREGPT_RULE, "tokens": TOKEN_RULE if cfg.count_tokens else "not counted"},
            counts={**counts, "files": [f"{name}/{f}" for f in shards.files]})
    return {**counts, "token_counts": stats.token_counts}   # the stage prints it; metrics leave it out
