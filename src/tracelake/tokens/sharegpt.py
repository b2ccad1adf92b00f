"""Trajectory messages -> LLaMA-Factory sharegpt rows (rule `sharegpt_v1`), checked the way
LLaMA-Factory's own converter checks them, so the loader never drops an exported row.

LLaMA-Factory 0.9.5 (data/converter.py, SharegptDatasetConverter) keeps an example only when its
turns alternate — human/observation at even positions, gpt/function_call at odd ones, an even
count — and drops anything else with nothing but a log warning. The mapping, in order:

- leading `system` messages -> the `system` column (joined by a blank line); a system message
  after the first user or assistant turn -> reject `system_not_leading`;
- `user` -> human, `tool` -> observation, `assistant` -> gpt, content verbatim. `<think>…</think>`
  stays inside the gpt turn: the qwen3 template keeps every turn's thought in SFT and adds an
  empty one to a turn that has none;
- consecutive messages on one side (prompt side: user/tool; response side: assistant) become one
  turn, their contents joined by a blank line (`same_role: merge`; a merged prompt turn is
  `observation` only when every part was a tool message), or the row is rejected
  (`same_role: reject`, reason `consecutive_same_role`);
- prompt-side turns after the last assistant turn carry nothing to train on and would make the
  count odd: they are trimmed (counted per row in `trimmed`);
- rejects: `empty_conversation`, `starts_with_assistant`, `no_assistant_turn`, plus the two above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from tracelake.core.errors import check

SHAREGPT_RULE = "sharegpt_v1"
SAME_ROLE_POLICIES = ("merge", "reject")
JOIN = "\n\n"

# dataset_info.json: the column and tag names of the rows written here.
DATASET_INFO_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}
_EVEN_TAGS = ("human", "observation")  # what LLaMA-Factory accepts at positions 0, 2, 4, ...
_ODD_TAGS = ("gpt", "function_call")
_SIDE = {"user": "prompt", "tool": "prompt", "assistant": "response"}
REJECT_REASONS = (
    "empty_conversation",
    "starts_with_assistant",
    "system_not_leading",
    "consecutive_same_role",
    "no_assistant_turn",
    "over_cutoff_len",
    "special_token_in_text",  # tokens/special_token_screen.py (filter.special_tokens: reject)
)


class ExportReject(Exception):
    """One row that cannot become a training example; it goes to the export's rejects."""

    def __init__(self, reason: str, detail: str):
        check(reason in REJECT_REASONS, f"unknown export reject reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class SharegptRow:
    system: str
    conversations: list[dict[str, str]]  # [{from, value}], alternating, even length
    merged: int  # messages folded into the turn before them
    trimmed: int  # trailing prompt-side messages removed


def to_sharegpt(messages: Iterable[dict[str, Any]], same_role: str = "merge") -> SharegptRow:
    """One trajectory's messages -> a sharegpt row LLaMA-Factory will keep, or ExportReject."""
    if same_role not in SAME_ROLE_POLICIES:
        raise ValueError(f"same_role must be one of {SAME_ROLE_POLICIES}, got {same_role!r}")
    messages = list(messages)
    if not messages:
        raise ExportReject("empty_conversation", "the trajectory has no messages")
    systems: list[str] = []
    i = 0
    while i < len(messages) and messages[i]["role"] == "system":
        systems.append(messages[i]["content"] or "")
        i += 1
    turns: list[tuple[str, list[str], list[str]]] = []  # (side, roles, contents)
    merged = 0
    for j, m in enumerate(messages[i:], start=i):
        role, content = m["role"], m["content"] or ""
        if role == "system":
            raise ExportReject("system_not_leading", f"message {j} is a system message after the conversation began")
        side = _SIDE.get(role)
        if side is None:
            raise ValueError(
                f"message {j} has role {role!r}; the trajectories schema allows system/user/assistant/tool"
            )
        if turns and turns[-1][0] == side:
            if same_role == "reject":
                raise ExportReject(
                    "consecutive_same_role",
                    f"messages {j - 1} and {j} are both {side}-side ({turns[-1][1][-1]}, {role})",
                )
            turns[-1][1].append(role)
            turns[-1][2].append(content)
            merged += 1
        else:
            turns.append((side, [role], [content]))
    if not turns:
        raise ExportReject("empty_conversation", "the trajectory has only system messages")
    if turns[0][0] == "response":
        raise ExportReject("starts_with_assistant", "the first non-system message is an assistant message")
    trimmed = 0
    while turns and turns[-1][0] == "prompt":
        roles = turns.pop()[1]
        trimmed += len(roles)
        merged -= len(roles) - 1
    if not turns:
        raise ExportReject("no_assistant_turn", "the trajectory has no assistant message")
    conversations = [{"from": _tag(side, roles), "value": JOIN.join(contents)} for side, roles, contents in turns]
    check_alternation(conversations)
    return SharegptRow(JOIN.join(systems), conversations, merged, trimmed)


@dataclass(frozen=True)
class SharegptBatch:
    """`to_sharegpt` over a column of trajectories at once (`sharegpt_batch`). `ok[i]` says
    whether row i became an example; the arrays hold the examples of the ok rows, in order.
    Rows not ok are the ones `to_sharegpt` rejects: run it on them for the reason."""

    ok: list[bool]
    system: Any  # pa.StringArray, one per ok row
    conversations: Any  # pa.ListArray of struct<from, value>, one per ok row
    merged: list[int]  # per ok row
    trimmed: list[int]


def sharegpt_batch(messages: Any, same_role: str = "merge") -> SharegptBatch:
    """`to_sharegpt` for a pyarrow ListArray of messages (list<struct<role, content>>), the text
    staying in Arrow: only roles become Python objects, turns are joined by `binary_join`.
    Rows it cannot convert the simple way (every kind of reject) are marked not ok; for the others
    the result is the same as to_sharegpt's, value for value (tests/tokens/test_sharegpt.py checks it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if same_role not in SAME_ROLE_POLICIES:
        raise ValueError(f"same_role must be one of {SAME_ROLE_POLICIES}, got {same_role!r}")
    role_array, content_array = messages.flatten().flatten()
    roles = role_array.to_pylist()
    lengths = pc.fill_null(pc.list_value_length(messages), 0).to_pylist()
    side_of = _SIDE
    ok: list[bool] = []
    merged: list[int] = []
    trimmed: list[int] = []
    system_take: list[int] = []
    system_offsets = [0]
    turn_take: list[int] = []
    turn_offsets = [0]
    tags: list[str] = []
    conversation_offsets = [0]
    end = 0
    for length in lengths:
        start, end = end, end + length
        first = start
        while first < end and roles[first] == "system":
            first += 1
        starts: list[int] = []  # first message of each turn
        sides: list[str] = []
        good = first < end
        for j in range(first, end):
            side = side_of.get(roles[j])
            if side is None:  # a system message after the start (or a role the schema forbids)
                good = False
                break
            if not sides or sides[-1] != side:
                starts.append(j)
                sides.append(side)
        if good and sides[0] == "response":
            good = False
        if good and same_role == "reject" and len(starts) != end - first:
            good = False
        kept = len(sides) - (1 if good and sides[-1] == "prompt" else 0)
        if good and kept == 0:
            good = False
        ok.append(good)
        if not good:
            continue
        stop = starts[kept] if kept < len(starts) else end  # the trimmed messages start here
        merged.append((stop - first) - kept)
        trimmed.append(end - stop)
        system_take.extend(range(start, first))
        system_offsets.append(len(system_take))
        bounds = starts[:kept] + [stop]
        for k in range(kept):
            a, b = bounds[k], bounds[k + 1]
            turn_take.extend(range(a, b))
            turn_offsets.append(len(turn_take))
            if sides[k] == "response":
                tags.append("gpt")
            else:
                tags.append("observation" if all(roles[i] == "tool" for i in range(a, b)) else "human")
        conversation_offsets.append(len(tags))
    content = pc.fill_null(content_array, "")
    system = pc.binary_join(
        pa.ListArray.from_arrays(pa.array(system_offsets, pa.int32()), content.take(pa.array(system_take, pa.int64()))),
        JOIN,
    )
    values = pc.binary_join(
        pa.ListArray.from_arrays(pa.array(turn_offsets, pa.int32()), content.take(pa.array(turn_take, pa.int64()))),
        JOIN,
    )
    turns = pa.StructArray.from_arrays([pa.array(tags, pa.string()), values], names=["from", "value"])
    conversations = pa.ListArray.from_arrays(pa.array(conversation_offsets, pa.int32()), turns)
    return SharegptBatch(ok, system, conversations, merged, trimmed)


def _tag(side: str, roles: list[str]) -> str:
    if side == "response":
        return "gpt"
    return "observation" if all(r == "tool" for r in roles) else "human"


def check_alternation(conversations: list[dict[str, str]]) -> None:
    """LLaMA-Factory's own acceptance test for a sharegpt example, restated; raises Bug (the
    conversion above must never produce a row that fails it)."""
    check(len(conversations) % 2 == 0 and conversations, "sharegpt rows need an even, non-zero count")
    for k, turn in enumerate(conversations):
        allowed = _EVEN_TAGS if k % 2 == 0 else _ODD_TAGS
        check(turn["from"] in allowed, f"turn {k} is {turn['from']!r}, LLaMA-Factory expects one of {allowed}")


def dataset_info_entry(file_name: str) -> dict[str, Any]:
    """One dataset_info.json entry for shards written by this module (never `formatting: openai`,
    which injects text into the system prompt)."""
    return {
        "file_name": file_name,
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system"},
        "tags": dict(DATASET_INFO_TAGS),
    }
