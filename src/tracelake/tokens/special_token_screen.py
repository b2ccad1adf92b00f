"""Control-token literals in a batch of sharegpt rows (`filter.special_tokens`): reject the rows that
hold one, or escape them, before anything is counted or written, so the shards and their token counts
are the same text.

The filter already dropped such rows (special_token_in_text_v1) or counted their escaped text, with
filter.tokenizer; the export checks again with its own tokenizer (export_sft.tokenizer may be another
one), on the turns as merged, which is the text LLaMA-Factory reads. A gpt turn is a response: the
template's thought and tool-call words may stand there (tokens/special_tokens.py).
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from tracelake.core.errors import check
from tracelake.tokens.sharegpt import REJECT_REASONS, SharegptBatch
from tracelake.tokens.special_tokens import ControlTokens

REASON = "special_token_in_text"
check(REASON in REJECT_REASONS, f"{REASON} is not a listed export reject reason")


def screen_batch(batch: SharegptBatch, control: ControlTokens, policy: str) -> tuple[SharegptBatch, dict[int, str]]:
    """`batch` with control-token literals handled by `policy`, and {trajectory index: detail} of the
    rows it rejects (reject: those rows are marked not ok and leave the arrays; escape: none)."""
    if policy == "escape":
        return _escaped(batch, control), {}
    hits = _hostile_rows(batch, control)
    if not hits:
        return batch, {}
    return _without(batch, hits), {i: detail for i, (_, detail) in hits.items()}


def _turn_arrays(batch: SharegptBatch) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The turns' `from` and `value`, flat, and whether each is a response (gpt)."""
    turns = batch.conversations.flatten()
    froms, values = pc.struct_field(turns, "from"), pc.struct_field(turns, "value")
    return froms, values, pc.equal(froms, "gpt")


def _offsets(conversations: pa.ListArray) -> pa.Array:
    """The list offsets from 0, into the flattened turns."""
    offsets = conversations.offsets
    return pc.subtract(offsets, offsets[0])


def _regex_hits(values: pa.Array, is_response: pa.Array, control: ControlTokens) -> pa.Array:
    """Per value: does it hold a hostile literal (as a response where is_response)."""
    anywhere = pc.match_substring_regex(values, control.pattern(response=False))
    in_response = pc.match_substring_regex(values, control.pattern(response=True))
    return pc.if_else(is_response, in_response, anywhere)


def _hostile_rows(batch: SharegptBatch, control: ControlTokens) -> dict[int, tuple[int, str]]:
    """{trajectory index: (ok-row position, detail)} of the ok rows holding a hostile literal: the
    system prompt or the first such turn, and the token. The regex runs in Arrow; only hits reach Python."""
    froms, values, is_response = _turn_arrays(batch)
    turn_hit = _regex_hits(values, is_response, control).to_pylist()
    system_hit = pc.match_substring_regex(batch.system, control.pattern(response=False)).to_pylist()
    offsets = _offsets(batch.conversations).to_pylist()
    ok_rows = [i for i, good in enumerate(batch.ok) if good]
    found: dict[int, tuple[int, str]] = {}
    for k, i in enumerate(ok_rows):
        if system_hit[k]:
            token = control.hostile(batch.system[k].as_py(), response=False)[0]
            found[i] = (k, f"the system prompt holds {token}")
            continue
        turn = next((t for t in range(offsets[k], offsets[k + 1]) if turn_hit[t]), None)
        if turn is not None:
            tag = froms[turn].as_py()
            token = control.hostile(values[turn].as_py(), response=tag == "gpt")[0]
            found[i] = (k, f"{tag} turn {turn - offsets[k]} holds {token}")
    return found


def _without(batch: SharegptBatch, hits: dict[int, tuple[int, str]]) -> SharegptBatch:
    """`batch` with the hit rows marked not ok and taken out of its arrays."""
    drop = {k for k, _ in hits.values()}
    keep = [k for k in range(len(batch.merged)) if k not in drop]
    at = pa.array(keep, pa.int64())
    return SharegptBatch(
        ok=[good and i not in hits for i, good in enumerate(batch.ok)],
        system=batch.system.take(at),
        conversations=batch.conversations.take(at),
        merged=[batch.merged[k] for k in keep],
        trimmed=[batch.trimmed[k] for k in keep],
    )


def _escape_array(values: pa.Array, control: ControlTokens, response: bool) -> pa.Array:
    for pattern, rewrite in control.escape_rules(response):
        values = pc.replace_substring_regex(values, pattern, rewrite)
    return values


def _escaped(batch: SharegptBatch, control: ControlTokens) -> SharegptBatch:
    """`batch` with every turn and system prompt escaped (ControlTokens.escape, run by RE2 in Arrow;
    tests check it equals the Python one), the turns' boundaries unchanged."""
    froms, values, is_response = _turn_arrays(batch)
    escaped = pc.if_else(
        is_response, _escape_array(values, control, response=True), _escape_array(values, control, response=False)
    )
    turns = pa.StructArray.from_arrays([froms, escaped], names=["from", "value"])
    conversations = pa.ListArray.from_arrays(_offsets(batch.conversations), turns)
    return replace(batch, system=_escape_array(batch.system, control, response=False), conversations=conversations)
