"""One scale's selection -> LLaMA-Factory SFT shards: the rows (sharegpt_v1), their rejects and the
dataset_info.json that names the dataset by its content id.

    lake/exports/sft/<scale>/
      dataset_info.json        entries: <id> (every shard) and <id>.NNNNN (one shard each, in order)
      dataset_info.yaml        the same shards for LLaMA-Factory's v1 data engine (USE_V1=1)
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml
from tokenizers import Tokenizer

from tracelake.core.background import read_ahead
from tracelake.core.datasets import dataset_id
from tracelake.core.errors import BadInput, BadParams, check
from tracelake.core.executor import Executor
from tracelake.core.hashing import content_id
from tracelake.core.ids import shard_entry_name
from tracelake.core.lake import Lake
from tracelake.core.outputs import VERSION_HEX, read_manifest, write_json
from tracelake.core.schema import load_schema
from tracelake.core.stage import Manifest
from tracelake.core.tables import ShardWriter, TableWriter, read_table
from tracelake.core.ui import progress
from tracelake.export.params import ExportSftParams, SftTrainParams
from tracelake.export.pretokenized import LfData, sharegpt_rows, write_pretokenized
from tracelake.tokens.model_tokenizer import SOURCE_FILE
from tracelake.tokens.rendering import RenderedCounts, Rendering, ThoughtCounts, thought_counts
from tracelake.tokens.sharegpt import (
    SHAREGPT_RULE,
    dataset_info_entry,
)
from tracelake.tokens.special_tokens import ControlTokens
from tracelake.tokens.templates import DEFAULT, MODES, TEMPLATES, LfMode, TemplateSlots, template_slots
from tracelake.tokens.token_count import (
    CHECKPOINT_S,
    CountStats,
    TokenCounter,
    absorb,
    shard_counter,
    share,
    unshare,
)
from tracelake.tokens.tokenizer import tokenizer_file, tokenizer_fingerprint


@dataclass
class SftStats:
    rows_in: int = 0
    rows_out: int = 0
    rejected: Counter = field(default_factory=Counter)
    rows_merged: int = 0  # examples with at least one merged message
    messages_merged: int = 0
    rows_trimmed: int = 0  # examples whose trailing prompt-side messages were removed
    messages_trimmed: int = 0
    max_tokens: int = 0
    rows_with_system: int = 0  # examples with a system prompt (LLaMA-Factory v1's converter drops it)
    length_checked: bool = True  # False: tokens not counted, rows over cutoff_len not rejected
    trained_tokens: Counter = field(default_factory=Counter)  # LF mode -> tokens trained over every row
    thoughts: ThoughtCounts = field(default_factory=ThoughtCounts)  # assistant turns by reasoning, in the mode
    token_counts: str = ""  # what counting encoded (printed, not in metrics: it depends on the cache)
    pretokenized: dict[str, Any] | None = None  # the tokenized dataset's counts (export/pretokenized.py)
    pretokenized_line: str = ""  # and what writing it took (printed: it depends on the cache)

    def add(self, other: "SftStats") -> None:
        """Another batch's stats (a shard's, core/executor.py) into these."""
        for name in ("rows_in", "rows_out", "rows_merged", "messages_merged", "rows_trimmed", "messages_trimmed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.rows_with_system += other.rows_with_system
        self.rejected.update(other.rejected)
        self.trained_tokens.update(other.trained_tokens)
        self.thoughts.add(other.thoughts)
        self.max_tokens = max(self.max_tokens, other.max_tokens)
        self.length_checked = self.length_checked and other.length_checked

    def as_json(self) -> dict[str, Any]:
        return {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "length_checked": self.length_checked,
            "rejected": dict(sorted(self.rejected.items())),
            "rows_merged": self.rows_merged,
            "messages_merged": self.messages_merged,
            "rows_trimmed": self.rows_trimmed,
            "messages_trimmed": self.messages_trimmed,
            "max_tokens": self.max_tokens,
            "rows_with_system": self.rows_with_system,
            **({"trained_tokens": {m: self.trained_tokens[m] for m in MODES}} if self.length_checked else {}),
            "thinking": self.thoughts.as_json(),
            "pretokenized": self.pretokenized,
        }


COLUMNS = ["trajectory_id", "conversation_sha256", "messages"]


def trajectories_with_slots(
    slots: list[dict[str, Any]], trajectory_files: list[str], batch_size: int = 256
) -> Iterator[tuple[pa.Table, dict[str, list[dict[str, Any]]]]]:
    """The selected trajectories' (trajectory_id, conversation_sha256, messages) as Arrow batches, streamed in
    trajectory-file order, with the selection slots of each (by trajectory id, in selection order).

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
        for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size, columns=COLUMNS):
            batch = batch.filter(pc.is_in(batch.column("trajectory_id"), value_set=needed))
            found += batch.num_rows
            if batch.num_rows:
                yield pa.Table.from_batches([batch]), by_id
    if found != len(by_id):
        raise BadInput(
            f"{len(by_id) - found} selected trajectories are not in the trajectories tables "
            f"(a stale selection: run `dvc repro`)"
        )


@dataclass(frozen=True)
class SftSettings:
    """What shapes every row of one SFT export (convert_batch): export_sft.same_role, train.sft's
    cutoff_len and template, the counting tokenizer (None: no counts), the control tokens (None: the
    tokenizer's own), filter.special_tokens (reject or escape) and the trained mode (train.sft.mode
    with train.sft.thinking), whose rendering n_tokens counts (tokens/rendering.py)."""

    same_role: str
    cutoff_len: int | None
    tokenizer: Tokenizer | TokenCounter | None
    template: TemplateSlots
    control: ControlTokens | None = None
    special_tokens: str = "reject"
    mode: LfMode = DEFAULT
    packing: bool = False  # train.sft.packing: an example may then hold cutoff_len - 1 tokens

    @property
    def rendering(self) -> Rendering:
        name = next(n for n, t in TEMPLATES.items() if t == self.template)
        return Rendering(name, self.mode, self.same_role)


def convert_batch(
    trajectories: pa.Table, slots: dict[str, list[dict[str, Any]]], settings: SftSettings, stats: SftStats
) -> tuple[pa.Table, list[dict]]:
    """Trajectories (trajectory_id, messages) and the selection slots of each -> (sft rows as an
    Arrow table, export_rejects rows), one outcome per slot, in trajectory then slot order.

    The text stays in Arrow (`sharegpt_batch`); a trajectory it marks not ok is converted by
    `to_sharegpt`, which gives the reject. Control-token literals of `control` (the export tokenizer's,
    with the template's markup) are handled by `settings.special_tokens` before anything is counted: reject
    (`special_token_in_text`) or escape, so n_tokens counts the text written; None: the control tokens
    of `tokenizer` (without its tokenizer_config.json). Tokens are counted once
    per trajectory, however many upsampled copies it has; with tokenizer None they are not counted at
    all (n_tokens null, nothing rejected for length).
    """
    cutoff_len, tokenizer = settings.cutoff_len, settings.tokenizer
    limit = cutoff_len - 1 if cutoff_len is not None and settings.packing else cutoff_len
    limit_text = f"cutoff_len - 1 = {limit} (packing)" if settings.packing else f"cutoff_len {cutoff_len}"
    control = settings.control or _control_of(tokenizer, settings.template)
    ids = trajectories.column("trajectory_id").to_pylist()
    messages = trajectories.column("messages").combine_chunks()
    rendering = settings.rendering
    batch, refused = rendering.convert(messages, control, settings.special_tokens)
    rejects: list[dict] = []
    kept: list[int] = []  # index of each ok trajectory
    for i, good in enumerate(batch.ok):
        if good:
            kept.append(i)
        else:
            rejects.extend(_reject(slot, *refused[i]) for slot in slots[ids[i]])
    trained: dict[str, list[int]] = {}
    if tokenizer is None:
        stats.length_checked = False
        tokens: list[int | None] = [None] * len(kept)
    else:
        hashes = trajectories.column("conversation_sha256").to_pylist()
        recall = RenderedCounts(
            TokenCounter.of(tokenizer),
            batch,
            [hashes[i] for i in kept],
            rendering,
            control,
            settings.special_tokens,
        )
        tokens = recall.input_tokens()
        trained = {name: recall.trained_tokens(mode, cutoff_len) for name, mode in MODES.items()}
    has_system = pc.greater(pc.utf8_length(batch.system), 0).to_pylist()
    thoughts = thought_counts(batch.conversations, settings.template, settings.mode)
    take: list[int] = []
    columns: dict[str, list] = {
        name: [] for name in ("id", "slot_id", "trajectory_id", "task_id", "source", "task", "copy", "n_tokens")
    }
    for k, i in enumerate(kept):
        n_tokens = tokens[k]
        for slot in slots[ids[i]]:
            stats.rows_in += 1
            if n_tokens is not None and limit is not None and n_tokens > limit:
                rejects.append(
                    _reject(
                        slot,
                        "over_cutoff_len",
                        f"{n_tokens} tokens > {limit_text} (LLaMA-Factory would cut it silently)",
                    )
                )
                continue
            stats.rows_merged += batch.merged[k] > 0
            stats.messages_merged += batch.merged[k]
            stats.rows_trimmed += batch.trimmed[k] > 0
            stats.messages_trimmed += batch.trimmed[k]
            stats.max_tokens = max(stats.max_tokens, n_tokens or 0)
            stats.rows_with_system += has_system[k]
            stats.thoughts.add(thoughts[k])
            for name, counts in trained.items():  # each upsampled copy is trained on again
                stats.trained_tokens[name] += counts[k]
            take.append(k)
            columns["id"].append(f"{slot['source']}/{slot['name']}")
            for name in ("slot_id", "trajectory_id", "task_id", "source", "task", "copy"):
                columns[name].append(slot[name])
            columns["n_tokens"].append(n_tokens)
    stats.rows_in += sum(len(slots[ids[i]]) for i, good in enumerate(batch.ok) if not good)
    for rej in rejects:
        stats.rejected[rej["reason"]] += 1
    schema = load_schema("sft_rows")
    indices = pa.array(take, pa.int64())
    arrays = {
        **{name: pa.array(values, schema.arrow.field(name).type) for name, values in columns.items()},
        "conversations": batch.conversations.take(indices),
        "system": batch.system.take(indices),
    }
    out = schema.conform(pa.table({name: arrays[name] for name in schema.columns}))
    stats.rows_out += out.num_rows
    return out, rejects


@dataclass(frozen=True)
class SftShard:
    """One batch of an export, to convert anywhere (`convert_shard`, core/executor.py): its
    trajectories, their slots, the settings without a tokenizer, and where the counting tokenizer
    and its cache are (tokenizer directory, cache directory), or None: not counted."""

    trajectories: pa.Table
    slots: dict[str, list[dict[str, Any]]]
    settings: SftSettings
    counting: tuple[str, str | None] | None


@dataclass
class ConvertedShard:
    rows: pa.Table
    rejects: list[dict]
    stats: SftStats
    fresh: list[tuple[list[bytes], list[int]]]  # what counting encoded or remembered (token_count.absorb)
    count_stats: CountStats


def convert_shard(shard: SftShard) -> ConvertedShard:
    """convert_batch as a shard function: the rows, rejects and stats of one batch, and what its
    counting learnt, for the driver's token cache."""
    stats = SftStats()
    if shard.counting is None:
        rows, rejects = convert_batch(shard.trajectories, shard.slots, shard.settings, stats)
        return ConvertedShard(rows, rejects, stats, [], CountStats())
    with shard_counter(*shard.counting) as counter:
        settings = replace(shard.settings, tokenizer=counter)
        rows, rejects = convert_batch(shard.trajectories, shard.slots, settings, stats)
        return ConvertedShard(rows, rejects, stats, counter.fresh, counter.stats)


def _control_of(tokenizer: Tokenizer | TokenCounter | None, template: TemplateSlots) -> ControlTokens:
    if tokenizer is None:
        raise BadParams("convert_batch without a tokenizer needs `control`: the control tokens of export_sft.tokenizer")
    plain = tokenizer.tokenizer if isinstance(tokenizer, TokenCounter) else tokenizer
    return ControlTokens.of_tokenizer(plain, template.markup())


def _reject(r: dict[str, Any], reason: str, detail: str) -> dict[str, Any]:
    return {
        "item_id": r["slot_id"],
        "trajectory_id": r["trajectory_id"],
        "source": r["source"],
        "name": r["name"],
        "reason": reason,
        "detail": detail,
    }


def pretokenizes(cfg: ExportSftParams) -> bool:
    """Whether the export writes LLaMA-Factory's tokenized dataset (export_sft.pretokenize): always, or
    auto when its tokenizer is the training model's (the tokenizer stage wrote it from train.sft.model:
    ids of the project's own small BPE would be another model's)."""
    if cfg.pretokenize == "auto":
        return cfg.count_tokens and (Path(cfg.tokenizer) / SOURCE_FILE).is_file()
    return cfg.pretokenize == "always"


def dataset_info(dataset_id: str, shard_files: list[str]) -> dict[str, Any]:
    """dataset_info.json: the whole dataset under its content id, and one entry per shard in order."""
    info = {dataset_id: dataset_info_entry(dataset_id)}
    for i, f in enumerate(shard_files):
        info[shard_entry_name(dataset_id, i)] = dataset_info_entry(f"{dataset_id}/{f}")
    return info


def dataset_info_v1(dataset_id: str, export_dir: Path, shard_files: list[str], rows_with_system: int) -> str:
    """dataset_info.yaml for LLaMA-Factory's v1 data engine (USE_V1=1, `train_dataset:` this file):
    one entry per shard, in order (a directory entry would be listed in os.listdir order), each read
    by v1's sharegpt converter. No size or weight: either makes v1 resample the rows with replacement
    (v1/core/data_engine.py:108-113). v1 takes each path as given, relative to where it runs (the
    project root, as the generated configs' dataset_dir)."""
    header = [
        f"LLaMA-Factory v1 data engine (USE_V1=1): train_dataset: <this file>, for {dataset_id}.",
        "v1 reads `conversations` only: "
        + (
            f"{rows_with_system} rows have a system prompt it drops."
            if rows_with_system
            else "no row has a system prompt, so nothing is dropped."
        ),
        "Set cutoff_len and template explicitly: v1's defaults are 2048 and qwen3_nothink.",
    ]
    entries = {
        shard_entry_name(dataset_id, i): {
            "path": (export_dir / dataset_id / f).as_posix(),
            "source": "local",
            "converter": "sharegpt",
            "split": "train",
        }
        for i, f in enumerate(shard_files)
    }
    return "".join(f"# {h}\n" for h in header) + yaml.safe_dump(entries, sort_keys=False)


BATCH = 256


def export_sft(
    tmp: Path,
    lake: Lake,
    scale: str,
    sources: list[str],
    cfg: ExportSftParams,
    sft: SftTrainParams,
    params: dict[str, Any],
    token_cache: Path | None = None,
    special_tokens: str = "reject",
    executor: Executor | None = None,
) -> tuple[Manifest, dict[str, Any]]:
    """One scale's selection -> `tmp`, the temporary directory publish opened for
    <lake>/exports/sft/<scale>/ (shards, dataset_info.json, rejects). Returns the manifest (publish
    writes it) and the counts it records (dataset id, shards, in/out/rejected, ...; not its files) with
    `token_counts`, a line saying what counting encoded (it depends on the cache: not a metric), and
    `pretokenized_line`.
    `token_cache`: the segment token count cache (params tokenizer.cache), or None.
    `special_tokens`: filter.special_tokens, reject or escape control-token literals (convert_batch).
    Each batch is a shard (`convert_shard`) mapped on `executor` (default: this process): the rows
    come back in order and are written here, the same bytes whoever converted them."""
    sel_dir = lake.selection(scale)
    selection = read_manifest(sel_dir)
    slots = read_table(sel_dir, "selection").drop_columns(["score"]).to_pylist()
    trajectory_files = lake.table_files("trajectories", sources)
    tokenizer = TokenCounter.open(cfg.tokenizer, token_cache) if cfg.count_tokens else None
    counting = (str(cfg.tokenizer), str(token_cache) if token_cache else None) if tokenizer else None
    template = template_slots(sft.template)
    control = ControlTokens.open(tokenizer_file(cfg.tokenizer), template.markup())
    settings = SftSettings(
        cfg.same_role, sft.cutoff_len, None, template, control, special_tokens, sft.lf_mode(), sft.packing
    )
    lf_data = LfData(sft.cutoff_len, sft.packing, sft.neat_packing) if pretokenizes(cfg) else None
    rendering = settings.rendering
    stats = SftStats()
    total = selection["tables"]["selection"]["rows"]
    executor = executor or Executor()
    if tokenizer is not None:
        share(tokenizer, *counting)  # in this process, and in workers forked from it: the loaded cache
    try:
        with (
            ShardWriter(tmp / "shards", load_schema("sft_rows"), cfg.rows_per_shard) as shards,
            progress(f"export_sft {scale}") as (set_total, advance),
        ):
            rejects = TableWriter(tmp, load_schema("export_rejects"))
            set_total(total)
            # batches are read ahead (a thread), converted on the executor and written in order
            batches = read_ahead(trajectories_with_slots(slots, trajectory_files, BATCH))
            work = (SftShard(trajectories, by_id, settings, counting) for trajectories, by_id in batches)
            for done in executor.map(convert_shard, work):
                stats.add(done.stats)
                if tokenizer is not None:
                    absorb(tokenizer, done.fresh, done.count_stats)
                    tokenizer.checkpoint(CHECKPOINT_S)  # a rerun after a crash recalls these rows
                shards.write_batch(done.rows)
                for row in done.rejects:
                    rejects.write(row)
                advance(len(done.rejects) + done.rows.num_rows)
            info, reject_info = shards.close(), rejects.close()
        if tokenizer is not None:
            tokenizer.close()
            stats.token_counts = tokenizer.stats.summary()
        check(
            stats.rows_in == stats.rows_out + sum(stats.rejected.values()) == total,
            f"export_sft accounting: {total} slots, {stats.as_json()}",
        )
        if not info.rows:
            raise BadInput(
                f"export_sft {scale}: every one of {total} rows was rejected "
                f"({', '.join(f'{k} {v}' for k, v in sorted(stats.rejected.items()))})"
            )
        # the rows, how they are trained and how they are packed: another template, mode or packing of the
        # same rows is another dataset
        id_of = {
            "rows": info.version_id,
            "rendering": rendering.as_json(),
            "pretokenized": lf_data and lf_data.config_keys(),
        }
        name = dataset_id("sft", selection["params"]["rows"], content_id("sft_dataset", id_of, VERSION_HEX))
        (tmp / "shards").rename(tmp / name)
        if lf_data is not None:
            tokenized = write_pretokenized(
                sharegpt_rows([tmp / name / f for f in shards.files]),
                Lake.tokenized(tmp),
                template=sft.template,
                mode=sft.lf_mode(),
                data=lf_data,
                tokenizer=cfg.tokenizer,
                cache_dir=token_cache,
                n_rows=info.rows,
            )
            stats.pretokenized = {k: v for k, v in tokenized.as_json().items() if k not in ("seconds", "ids")}
            stats.pretokenized_line = f"{Lake.tokenized(Path())}/: {tokenized.summary()}"
        write_json(tmp / "dataset_info.json", dataset_info(name, shards.files))
        (tmp / "dataset_info.yaml").write_text(
            dataset_info_v1(name, lake.sft_export(scale), shards.files, stats.rows_with_system)
        )
        counts = {
            "dataset_id": name,
            "id_of": id_of,  # what the id hashes: content_id("sft_dataset", id_of)
            "shards": len(shards.files),
            "rendering": rendering.as_json(),
            **stats.as_json(),
        }
        manifest = Manifest(
            kind="export_sft",
            dataset_id=name,
            tables=[info.with_file(f"{name}/"), reject_info],
            inputs={
                "selection": selection["version_id"],
                "selection_dataset": selection["dataset_id"],
                "tokenizer": tokenizer_fingerprint(cfg.tokenizer) if cfg.count_tokens else None,
            },
            params=params,
            formulas={
                "rows": SHAREGPT_RULE,
                "tokens": rendering.describe() if cfg.count_tokens else "not counted",
                "special_tokens": f"{special_tokens}: {control.describe()}",
            },
            counts={**counts, "files": [f"{name}/{f}" for f in shards.files]},
        )
    finally:
        if tokenizer is not None:
            unshare(*counting)
    # the stage prints these; metrics leave them out (they depend on the cache)
    return manifest, {**counts, "token_counts": stats.token_counts, "pretokenized_line": stats.pretokenized_line}
