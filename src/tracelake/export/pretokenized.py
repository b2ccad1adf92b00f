"""Pre-tokenized SFT datasets: the tokenized dataset LLaMA-Factory 0.9.5 builds from sharegpt rows,
written once (token ids from a segment cache), so a training launch loads it instead of tokenizing.

What LLaMA-Factory loads (paths under llamafactory/, datasets/ of the training environment, line
numbers of LF 0.9.5 and datasets 4.0.0):

- data/loader.py:286-296 `get_dataset`: with `tokenized_path` set and `has_tokenized_data`
  (extras/misc.py:236-238: a non-empty directory) it calls `datasets.load_from_disk(tokenized_path)`
  and `get_dataset_module` (data/data_utils.py:134-155): a DatasetDict's `train` split is the
  train_dataset (a `validation` or `validation_*` split would be the eval set). It logs "Loading dataset
  from disk will ignore other data arguments" (:289): dataset, dataset_dir, eval_dataset, val_size,
  max_samples, mask_history, train_on_prompt, enable_thinking, preserve_thinking, the template's
  rendering, overwrite_cache and the preprocessing keys no longer change the examples (the template
  still fixes the tokenizer's eos and pad; cutoff_len still sets model_max_length, hparams/parser.py:518;
  `streaming: true` makes the loaded split iterable, :292-293). An empty or missing directory makes
  LF tokenize the datasets itself and save them there (:330-334).
- datasets' `DatasetDict.save_to_disk` layout (dataset_dict.py:1284, arrow_dataset.py:1492-1671),
  which `load_from_disk` reads (arrow_dataset.py:1690-1810): `dataset_dict.json` {"splits": ["train"]},
  `train/data-NNNNN-of-NNNNN.arrow` (Arrow IPC streams; the features in the schema metadata under
  "huggingface"), `train/dataset_info.json` (the features) and `train/state.json` (the data files, a
  fingerprint, no format). Here the fingerprint is a hash of the settings and the data, nothing
  random and no timestamp: the same inputs give byte-identical files.
- The examples, data/processor/supervised.py:52-135 `SupervisedDatasetProcessor`: each (prompt,
  response) pair of `encode_multiturn` (the pieces of templates.render_pieces, each encoded on its
  own), cut to cutoff_len by `infer_seqlen` (processor_utils.py:76-88; under mask_history the pairs
  are taken last first, :69-70), labels -100 on untrained tokens; columns input_ids (int32),
  attention_mask (int8, all 1), labels (int64) and null images/videos/audios. The int types are
  datasets' own choice by column name (arrow_writer.py:329-338).
- Packing, supervised.py:145-252 `PackedSupervisedDatasetProcessor`, per batch of `dataset.map`
  (loader.py:246-261: batch_size=preprocessing_batch_size over contiguous shards of
  preprocessing_num_workers processes; datasets arrow_dataset.py:3098-3101 and 3241-3249): examples of
  up to cutoff_len - 1 tokens (data_args.py:188-189 takes one off when packing), grouped by
  `greedy_knapsack` (processor_utils.py:48-73: ascending sort, then repeatedly the longest that
  still fits), within a group of equal lengths the last first; each pack padded to exactly
  cutoff_len tokens with the pad token, position_ids restart at 0 per example (0 on padding),
  labels -100 on padding, attention_mask 1 everywhere, plus position_ids (int64).
- `neat_packing` (data_args.py:185-186 turns packing on; parser.py:320-321: SFT only): the
  attention_mask numbers the examples of a pack 1, 2, ... and padding 0; a `packing_params` struct
  (sequence_boundaries, image/video/audio_subseq_ids [2**32], right_padding_length); and every
  int column int64 (loader.py:201-214 turns datasets' int optimisation off). At training time
  parser.py:519 derives `block_diag_attn` from neat_packing, and the collator (data/collator.py:
  521-530) builds the block-diagonal 4D mask from those numbers (or, with flash_attention_2, unpads
  and lets the kernel split at position_ids). So the training config must keep `neat_packing: true`
  (and packing) for a neat-packed directory: the collator reads it, the loader does not.

LLaMA-Factory drops an invalid example (turns not alternating) with a warning; here such a row is
refused (BadInput), so example i is the export's row i (without packing) in the export's order.
The pad id is the tokenizer's pad_token (tokenizer_config.json), else its eos after the template
replaced it (`<|im_end|>` for qwen3 and qwen3_nothink, template.py:189-204).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import shutil
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tracelake.core.errors import BadInput, BadParams
from tracelake.tokens.sharegpt import SharegptRow
from tracelake.tokens.templates import DEFAULT, LfMode, TemplateSlots, lf_mode, render_pieces, template_slots
from tracelake.tokens.token_ids import IdStats, TokenIds
from tracelake.tokens.tokenizer import tokenizer_file

RULE = "lf_pretokenized_v1"
LLAMAFACTORY = "0.9.5"
MANIFEST = "pretokenized.json"  # ours, beside dataset_dict.json (load_from_disk reads only the splits)
IGNORE_INDEX = -100
NO_SUBSEQ = 2**32  # supervised.py:30 MAX_SU_SEQ_IDX: "no image/video/audio in this pack"
MAX_SHARD_BYTES = 500_000_000  # datasets' MAX_SHARD_SIZE for save_to_disk
BATCH_ROWS = 1000  # examples per Arrow record batch (datasets writes 1000)
BATCH_TOKENS = 1 << 22  # ... or fewer, when they hold this many tokens (memory: ~13 bytes a token)
ENCODE_ROWS = 256  # rows rendered and encoded together (their segments looked up at once)
_STOP_WORD = "<|im_end|>"  # the eos qwen3 / qwen3_nothink put in place (replace_eos, template.py:1972-1973)


@dataclass(frozen=True)
class LfData:
    """The LLaMA-Factory DataArguments (hparams/data_args.py) that shape the tokenized dataset besides the
    mode's: `cutoff_len` as the config writes it, packing, neat_packing, and for packing the batches
    its dataset.map packs in (preprocessing_batch_size, preprocessing_num_workers)."""

    cutoff_len: int
    packing: bool = False
    neat_packing: bool = False
    preprocessing_batch_size: int = 1000
    preprocessing_num_workers: int | None = None

    def __post_init__(self) -> None:
        if self.cutoff_len < 2:
            raise BadParams(f"cutoff_len must be at least 2, got {self.cutoff_len}")
        if self.neat_packing and not self.packing:  # data_args.py:185-186
            object.__setattr__(self, "packing", True)

    @property
    def limit(self) -> int:
        """The cutoff the supervised processor applies: one less when packing (data_args.py:188-189)."""
        return self.cutoff_len - 1 if self.packing else self.cutoff_len

    def config_keys(self) -> dict[str, Any]:
        """The keys of a LLaMA-Factory config that must agree with a directory written with these."""
        return {"cutoff_len": self.cutoff_len, "packing": self.packing, "neat_packing": self.neat_packing}


@dataclass
class PretokenizedStats:
    rows: int = 0
    examples: int = 0  # rows, or packs
    tokens: int = 0  # input tokens, padding excluded
    trained_tokens: int = 0  # labels != -100
    padding: int = 0  # pad tokens added to packs
    truncated_rows: int = 0  # rows LLaMA-Factory cuts at cutoff_len (infer_seqlen)
    cut_tokens: int = 0  # tokens those cuts remove
    seconds: float = 0.0
    ids: IdStats = field(default_factory=IdStats)

    def as_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in vars(self).items() if k != "ids"}, "ids": self.ids.as_json()}

    def summary(self) -> str:
        cut = (
            f", {self.truncated_rows:,} rows cut at cutoff_len (-{self.cut_tokens:,} tokens)"
            if self.truncated_rows
            else ""
        )
        return (
            f"{self.rows:,} rows -> {self.examples:,} examples, {self.tokens:,} tokens ({self.trained_tokens:,} "
            f"trained, {self.padding:,} padding){cut} in {self.seconds:.1f} s; ids: {self.ids.summary()}"
        )


def write_pretokenized(
    rows: Iterable[SharegptRow],
    out_dir: Path | str,
    *,
    template: str,
    mode: LfMode | str = DEFAULT,
    data: LfData,
    tokenizer: Path | str,
    cache_dir: Path | str | None = None,
    n_rows: int | None = None,
) -> PretokenizedStats:
    """Write LLaMA-Factory 0.9.5's tokenized SFT dataset of `rows` (in order) to `out_dir`, the
    directory a config names as `tokenized_path` (module docstring).

    `template`: train.sft.template (templates.TEMPLATES); `mode`: the LF mode (templates.MODES; not
    v1, which has no tokenized_path); `data`: cutoff_len and packing as the config says; `tokenizer`:
    the training tokenizer's directory (tokenizer.json, and tokenizer_config.json for the pad token);
    `cache_dir`: the token cache directory (segment ids are kept under it, beside the counts).
    `n_rows`: the number of rows, needed only to pack with several preprocessing workers when `rows`
    has no len(). The directory is written beside `out_dir` and renamed into place: LLaMA-Factory
    never sees half of one. An existing `out_dir` is replaced only if this module wrote it.
    """
    started = time.monotonic()
    slots = template_slots(template)
    mode = lf_mode(mode) if isinstance(mode, str) else mode
    if mode.v1:
        raise BadParams("a pre-tokenized dataset is LLaMA-Factory v0's (tokenized_path): mode v1 has none")
    out_dir = Path(out_dir)
    _check_replaceable(out_dir)
    if n_rows is None and isinstance(rows, Sequence):
        n_rows = len(rows)
    stats = PretokenizedStats()
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "train").mkdir(parents=True)
    try:
        with TokenIds.open(tokenizer, cache_dir) as encoder:
            pad_id = pad_token_id(tokenizer, encoder) if data.packing else None
            features = _features(data)
            settings = {
                "rule": RULE,
                "llamafactory": LLAMAFACTORY,
                "tokenizer_sha256": encoder.sha256,
                "template": template,
                "mode": mode.name,
                "lf_args": mode.lf_args(),
                **data.config_keys(),
                "preprocessing_batch_size": data.preprocessing_batch_size if data.packing else None,
                "preprocessing_num_workers": data.preprocessing_num_workers if data.packing else None,
                "pad_token_id": pad_id,
            }
            writer = _ArrowShards(tmp / "train", features, settings)
            examples = _examples(rows, slots, mode, data.limit, encoder, stats)
            if data.packing:
                if n_rows is None and (data.preprocessing_num_workers or 1) > 1:
                    raise BadParams("packing with several preprocessing workers needs the number of rows (n_rows)")
                batches = _pack_batches(examples, n_rows, data)
                for packs in _packed(batches, data, pad_id, stats):
                    writer.write(packs)
            else:
                for chunk in _chunks(examples, BATCH_ROWS, BATCH_TOKENS):
                    writer.write(_plain_batch(chunk, stats))
            if not stats.rows:
                raise BadInput("no rows to tokenize: LLaMA-Factory would find no valid samples")
            files, fingerprint, size = writer.close()
            stats.ids = encoder.stats
        _write_json(tmp / "dataset_dict.json", {"splits": ["train"]}, indent=None, sort_keys=False)
        _write_json(
            tmp / "train" / "state.json",
            {
                "_data_files": [{"filename": f} for f in files],
                "_fingerprint": fingerprint,
                "_format_columns": None,
                "_format_kwargs": {},
                "_format_type": None,
                "_output_all_columns": False,
                "_split": "train",
            },
        )
        _write_json(tmp / "train" / "dataset_info.json", _dataset_info(features, settings, stats.examples, size))
        counts = {k: v for k, v in stats.as_json().items() if k not in ("seconds", "ids")}
        _write_json(tmp / MANIFEST, {**settings, "fingerprint": fingerprint, "counts": counts, "files": files})
        _replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    stats.seconds = time.monotonic() - started
    return stats


def lf_config_keys(out_dir: Path | str) -> dict[str, Any]:
    """What a LLaMA-Factory config needs to train from a directory this module wrote: tokenized_path
    and the keys that must agree with it (cutoff_len, packing, neat_packing; the mode's arguments and
    the template, which LF no longer applies but which keep the config honest)."""
    manifest = read_pretokenized(out_dir)
    return {
        "tokenized_path": str(out_dir),
        "template": manifest["template"],
        "cutoff_len": manifest["cutoff_len"],
        "packing": manifest["packing"],
        "neat_packing": manifest["neat_packing"],
        **manifest["lf_args"],
    }


def read_pretokenized(out_dir: Path | str) -> dict[str, Any]:
    """The manifest of a directory this module wrote (BadInput if it is not one)."""
    path = Path(out_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{out_dir} is not a pre-tokenized dataset written by tracelake ({MANIFEST}: {exc})") from exc
    if manifest.get("rule") != RULE:
        raise BadInput(f"{out_dir}: rule {manifest.get('rule')!r}, expected {RULE!r}")
    return manifest


def sharegpt_rows(files: Iterable[Path | str], batch_rows: int = 256) -> Iterator[SharegptRow]:
    """The sharegpt rows of export_sft's shards (system, conversations), in file order, a batch at a time."""
    for f in files:
        pf = pq.ParquetFile(f, pre_buffer=False)  # pre-buffering keeps every row group read until the end
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["system", "conversations"]):
            for system, conversations in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                yield SharegptRow(system or "", conversations, 0, 0)


def pad_token_id(tokenizer: Path | str, encoder: TokenIds) -> int:
    """LLaMA-Factory's pad id for packs: the tokenizer's pad_token (tokenizer_config.json, else
    special_tokens_map.json), else the eos the qwen3 templates put in place (template.py:199-204)."""
    directory = tokenizer_file(tokenizer).parent
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = directory / name
        if not path.is_file():
            continue
        pad = json.loads(path.read_text()).get("pad_token")
        if isinstance(pad, dict):
            pad = pad.get("content")
        if pad:
            found = encoder.token_id(pad)
            if found is None:
                raise BadParams(f"{path}: pad_token {pad!r} is not in the tokenizer")
            return found
    found = encoder.token_id(_STOP_WORD)
    if found is None:
        raise BadParams(f"tokenizer {tokenizer}: no pad_token and no {_STOP_WORD!r} to pad packs with")
    return found


# --- examples ------------------------------------------------------------------------------------


@dataclass
class _Example:
    ids: np.ndarray  # uint32
    trained: np.ndarray  # bool, per token

    def __len__(self) -> int:
        return len(self.ids)

    def labels(self) -> np.ndarray:
        return np.where(self.trained, self.ids.astype(np.int64), IGNORE_INDEX)


def _examples(
    rows: Iterable[SharegptRow],
    slots: TemplateSlots,
    mode: LfMode,
    limit: int,
    encoder: TokenIds,
    stats: PretokenizedStats,
) -> Iterator[_Example]:
    """Each row's input ids and trained positions, as LLaMA-Factory's supervised processor builds them."""
    for chunk in _chunks(rows, ENCODE_ROWS):
        rendered = []
        for row in chunk:
            _check_row(row, stats.rows + len(rendered))
            rendered.append(list(render_pieces(row, slots, mode)))
        ids = encoder.encode([text for pieces in rendered for text, _, _ in pieces])
        at = 0
        for pieces in rendered:
            example = _example(pieces, ids[at : at + len(pieces)], mode, limit, stats)
            at += len(pieces)
            stats.rows += 1
            yield example


def _check_row(row: SharegptRow, index: int) -> None:
    turns = row.conversations
    ok = bool(turns) and len(turns) % 2 == 0
    for k, turn in enumerate(turns or ()):
        ok = ok and turn["from"] in (("human", "observation") if k % 2 == 0 else ("gpt",))
    if not ok:
        raise BadInput(
            f"row {index}: turns must alternate human/observation then gpt, an even count; LLaMA-Factory would "
            f"drop this example and every later example would move (got {[t['from'] for t in turns or ()]})"
        )


def _example(
    pieces: list[tuple[str, str, bool]], ids: list[np.ndarray], mode: LfMode, limit: int, stats: PretokenizedStats
) -> _Example:
    total = sum(len(a) for a in ids)
    if total <= limit:  # nothing to cut: every pair whole, in order
        flat = np.concatenate(ids) if ids else np.zeros(0, np.uint32)
        trained = np.repeat(np.array([t for _, _, t in pieces], dtype=bool), [len(a) for a in ids])
        return _Example(flat, trained)
    # LLaMA-Factory's cut (supervised.py:66-100): (prompt, response) pairs; the empty thought is in the
    # response when it is trained as one (enable_thinking), else at the end of the prompt
    pairs: list[tuple[list[int], list[int]]] = []  # piece indices of each pair's prompt, response
    prompt: list[int] = []
    response: list[int] = []
    for i, (_, role, _) in enumerate(pieces):
        if role == "gpt":
            pairs.append((prompt, [*response, i]))
            prompt, response = [], []
        elif role == "empty_thought" and mode.enable_thinking:
            response.append(i)
        else:
            prompt.append(i)
    order = pairs[::-1] if mode.mask_history else pairs
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    length = 0
    for source, target in order:
        if length >= limit:
            break
        s_ids, s_tr = _join(source, ids, pieces)
        t_ids, t_tr = _join(target, ids, pieces)
        s_len, t_len = infer_seqlen(len(s_ids), len(t_ids), limit - length)
        length += s_len + t_len
        kept.append((np.concatenate([s_ids[:s_len], t_ids[:t_len]]), np.concatenate([s_tr[:s_len], t_tr[:t_len]])))
    if mode.mask_history:
        kept.reverse()
    stats.truncated_rows += 1
    stats.cut_tokens += total - length
    return _Example(np.concatenate([k[0] for k in kept]), np.concatenate([k[1] for k in kept]))


def _join(
    indices: list[int], ids: list[np.ndarray], pieces: list[tuple[str, str, bool]]
) -> tuple[np.ndarray, np.ndarray]:
    if not indices:
        return np.zeros(0, np.uint32), np.zeros(0, bool)
    parts = [ids[i] for i in indices]
    trained = np.repeat(np.array([pieces[i][2] for i in indices], dtype=bool), [len(p) for p in parts])
    return np.concatenate(parts), trained


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """How many prompt and response tokens of a pair LLaMA-Factory keeps with `cutoff_len` tokens of room
    (processor_utils.py:76-88): a short response is kept whole, else a short prompt, else both are cut
    in proportion (rounded down for the response)."""
    if target_len * 2 < cutoff_len:
        target_room = cutoff_len
    elif source_len * 2 < cutoff_len:
        target_room = cutoff_len - source_len
    else:
        target_room = int(cutoff_len * (target_len / (source_len + target_len)))
    target = min(target_room, target_len)
    return min(max(cutoff_len - target, 0), source_len), target


# --- packing -------------------------------------------------------------------------------------


def map_batches(n_rows: int, batch_size: int, num_workers: int | None) -> list[tuple[int, int]]:
    """The [start, end) row ranges `Dataset.map(batched=True, batch_size, num_proc)` hands the processor:
    contiguous shards, one per process (num_proc at most the rows), then batches within each shard."""
    shards = num_workers or 1
    if shards > n_rows:
        shards = max(n_rows, 1)
    div, mod = divmod(n_rows, shards)
    ranges = []
    for index in range(shards):
        start = div * index + min(index, mod)
        end = start + div + (1 if index < mod else 0)
        step = batch_size if batch_size and batch_size > 0 else max(end - start, 1)
        ranges += [(s, min(s + step, end)) for s in range(start, end, step)]
    return ranges


def knapsacks(lengths: list[int], capacity: int) -> list[list[int]]:
    """LLaMA-Factory's greedy packing of lengths (processor_utils.py:54-73): the lengths sorted, each
    pack filled by taking, again and again, the longest one that still fits."""
    pool = sorted(lengths)
    packs = []
    while pool:
        pack, room = [], capacity
        while (i := bisect.bisect_right(pool, room) - 1) >= 0:
            room -= pool[i]
            pack.append(pool.pop(i))
        if not pack:
            raise BadInput(f"an example of {pool[0]} tokens does not fit in a pack of {capacity}")
        packs.append(pack)
    return packs


def _pack_batches(examples: Iterator[_Example], n_rows: int | None, data: LfData) -> Iterator[list[_Example]]:
    if n_rows is None:  # one shard: plain batches (n_rows is only needed to cut shards)
        yield from _chunks(examples, data.preprocessing_batch_size if data.preprocessing_batch_size > 0 else 1 << 62)
        return
    for start, end in map_batches(n_rows, data.preprocessing_batch_size, data.preprocessing_num_workers):
        batch = [e for _, e in zip(range(end - start), examples)]
        if len(batch) != end - start:
            raise BadParams(f"n_rows is {n_rows} but the rows ran out at {start + len(batch)}")
        yield batch
    if next(examples, None) is not None:
        raise BadParams(f"n_rows is {n_rows} but there are more rows")


def _packed(
    batches: Iterable[list[_Example]], data: LfData, pad_id: int, stats: PretokenizedStats
) -> Iterator[pa.RecordBatch]:
    """supervised.py:145-252 for each map batch: keep what fits, pack, pad each pack to cutoff_len."""
    limit = data.limit
    width = limit + 1  # every pack's length
    for batch in batches:
        kept = [e for e in batch if len(e) <= limit]  # longer ones LF drops; its own cut rules them out
        by_length: dict[int, list[int]] = defaultdict(list)
        for k, e in enumerate(kept):
            by_length[len(e)].append(k)
        packs = knapsacks([len(e) for e in kept], limit)
        for group in _chunks(iter(packs), max(1, min(BATCH_ROWS, BATCH_TOKENS // width))):
            ids = np.full((len(group), width), pad_id, dtype=np.int64)
            labels = np.full((len(group), width), IGNORE_INDEX, dtype=np.int64)
            positions = np.zeros((len(group), width), dtype=np.int64)
            mask = (
                np.zeros((len(group), width), dtype=np.int64)
                if data.neat_packing
                else np.ones((len(group), width), np.int64)
            )
            boundaries, paddings = [], []
            for p, pack in enumerate(group):
                at, bounds = 0, [0]
                for i, length in enumerate(pack):
                    e = kept[by_length[length].pop()]
                    ids[p, at : at + length] = e.ids
                    labels[p, at : at + length] = e.labels()
                    positions[p, at : at + length] = np.arange(length)
                    if data.neat_packing:
                        mask[p, at : at + length] = i + 1
                    at += length
                    bounds.append(at)
                    stats.trained_tokens += int(e.trained.sum())
                stats.tokens += at
                stats.padding += width - at
                boundaries.append([*bounds, width])
                paddings.append(width - at)
            stats.examples += len(group)
            yield _packed_batch(ids, labels, positions, mask, boundaries, paddings, data)


def _packed_batch(ids, labels, positions, mask, boundaries, paddings, data: LfData) -> pa.RecordBatch:
    n, width = ids.shape
    offsets = pa.array(np.arange(n + 1, dtype=np.int32) * width)

    def lists(values: np.ndarray, dtype: pa.DataType) -> pa.Array:
        return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), dtype))

    int_ids = pa.int64() if data.neat_packing else pa.int32()
    int_mask = pa.int64() if data.neat_packing else pa.int8()
    columns: dict[str, pa.Array] = {"input_ids": lists(ids, int_ids)}
    if data.neat_packing:
        no_subseq = pa.array([[NO_SUBSEQ]] * n, pa.list_(pa.int64()))
        columns["packing_params"] = pa.StructArray.from_arrays(
            [
                pa.array(boundaries, pa.list_(pa.int64())),
                no_subseq,
                no_subseq,
                no_subseq,
                pa.array(paddings, pa.int64()),
            ],
            names=[
                "sequence_boundaries",
                "image_subseq_ids",
                "video_subseq_ids",
                "audio_subseq_ids",
                "right_padding_length",
            ],
        )
    columns["attention_mask"] = lists(mask, int_mask)
    columns["position_ids"] = lists(positions, pa.int64())
    columns["labels"] = lists(labels, pa.int64())
    for name in ("images", "videos", "audios"):
        columns[name] = pa.nulls(n)
    return pa.RecordBatch.from_pydict(columns)


def _plain_batch(examples: list[_Example], stats: PretokenizedStats) -> pa.RecordBatch:
    lengths = np.array([len(e) for e in examples], dtype=np.int64)
    offsets = np.zeros(len(examples) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate([e.ids for e in examples])
    trained = np.concatenate([e.trained for e in examples])
    stats.examples += len(examples)
    stats.tokens += len(ids)
    stats.trained_tokens += int(trained.sum())
    if offsets[-1] >= 2**31:
        raise BadInput("a batch of examples holds more than 2**31 tokens")
    off = pa.array(offsets.astype(np.int32))
    return pa.RecordBatch.from_pydict(
        {
            "input_ids": pa.ListArray.from_arrays(off, pa.array(ids.astype(np.int32))),
            "attention_mask": pa.ListArray.from_arrays(off, pa.array(np.ones(len(ids), np.int8))),
            "labels": pa.ListArray.from_arrays(off, pa.array(np.where(trained, ids.astype(np.int64), IGNORE_INDEX))),
            "images": pa.nulls(len(examples)),
            "videos": pa.nulls(len(examples)),
            "audios": pa.nulls(len(examples)),
        }
    )


# --- the datasets layout -------------------------------------------------------------------------


def _value(dtype: str) -> dict[str, str]:
    return {"dtype": dtype, "_type": "Value"}


def _sequence(dtype: str) -> dict[str, Any]:
    # "Sequence" (not datasets 4's "List"): read as a list by every datasets LF 0.9.5 accepts (2.16-4.0.0)
    return {"feature": _value(dtype), "length": -1, "_type": "Sequence"}


def _features(data: LfData) -> dict[str, Any]:
    """datasets' features of the columns LLaMA-Factory's processor writes, in its order and types."""
    wide = data.neat_packing  # loader.py:201-214: datasets' int optimisation off, every int column int64
    features: dict[str, Any] = {"input_ids": _sequence("int64" if wide else "int32")}
    if data.neat_packing:
        features["packing_params"] = {
            **{
                name: _sequence("int64")
                for name in ("sequence_boundaries", "image_subseq_ids", "video_subseq_ids", "audio_subseq_ids")
            },
            "right_padding_length": _value("int64"),
        }
    features["attention_mask"] = _sequence("int64" if wide else "int8")
    if data.packing:
        features["position_ids"] = _sequence("int64")
    features["labels"] = _sequence("int64")
    for name in ("images", "videos", "audios"):
        features[name] = _value("null")
    return features


def _dataset_info(features: dict[str, Any], settings: dict[str, Any], examples: int, size: int) -> dict[str, Any]:
    description = (
        f"LLaMA-Factory {LLAMAFACTORY} tokenized SFT dataset ({RULE}): template {settings['template']}, "
        f"mode {settings['mode']}, cutoff_len {settings['cutoff_len']}, packing {str(settings['packing']).lower()}, "
        f"neat_packing {str(settings['neat_packing']).lower()}"
    )
    info = {
        "citation": "",
        "dataset_size": size,
        "description": description,
        "features": features,
        "homepage": "",
        "license": "",
        "size_in_bytes": size,
        "splits": {"train": {"name": "train", "num_bytes": size, "num_examples": examples, "dataset_name": None}},
    }
    return dict(sorted(info.items()))


class _ArrowShards:
    """Record batches -> datasets' data-NNNNN-of-NNNNN.arrow streams, a new one past MAX_SHARD_BYTES;
    a running hash of the settings and the data is the dataset's fingerprint."""

    def __init__(self, directory: Path, features: dict[str, Any], settings: dict[str, Any]):
        self.directory = directory
        self.features = features
        self.hash = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())  # the fastest hashlib hash here
        self.files: list[Path] = []
        self.size = 0
        self._sink: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._schema: pa.Schema | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        if self._schema is None:
            metadata = {"huggingface": json.dumps({"info": {"features": self.features}})}
            self._schema = batch.schema.with_metadata(metadata)
        batch = pa.RecordBatch.from_arrays(batch.columns, schema=self._schema)
        if self._writer is None:
            path = self.directory / f".shard-{len(self.files):05d}"
            self.files.append(path)
            self._sink = pa.OSFile(str(path), "wb")
            self._writer = pa.ipc.new_stream(self._sink, self._schema)
        self._writer.write_batch(batch)
        for column in batch.columns:
            for buffer in column.buffers():
                if buffer is not None:
                    self.hash.update(memoryview(buffer))
        if self._sink.tell() >= MAX_SHARD_BYTES:
            self._end()

    def _end(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self.size += self._sink.tell()
            self._sink.close()
            self._writer = self._sink = None

    def close(self) -> tuple[list[str], str, int]:
        """Finish the shards; (their final names, in order; the fingerprint; their bytes)."""
        self._end()
        names = [f"data-{i:05d}-of-{len(self.files):05d}.arrow" for i in range(len(self.files))]
        for path, name in zip(self.files, names):
            path.replace(self.directory / name)
        return names, self.hash.hexdigest()[:16], self.size


def _write_json(path: Path, value: Any, indent: int | None = 2, sort_keys: bool = True) -> None:
    path.write_text(json.dumps(value, indent=indent, sort_keys=sort_keys))


def _check_replaceable(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / MANIFEST).is_file())):
        raise BadParams(f"{out_dir} exists and is not a pre-tokenized dataset written by tracelake: not replacing it")


def _replace(tmp: Path, out_dir: Path) -> None:
    """Put the finished directory in place of out_dir (an old one is moved aside, then removed)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    if out_dir.exists():
        out_dir.replace(old)
    tmp.replace(out_dir)
    if old.exists():
        shutil.rmtree(old)


def _chunks(items: Iterable[Any], size: int, tokens: int | None = None) -> Iterator[list[Any]]:
    """Lists of `size` items, or fewer where their len() adds up to `tokens` (when given)."""
    chunk: list[Any] = []
    held = 0
    for item in items:
        chunk.append(item)
        held += len(item) if tokens else 0
        if len(chunk) >= size or (tokens and held >= tokens):
            yield chunk
            chunk, held = [], 0
    if chunk:
        yield chunk
