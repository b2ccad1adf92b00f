"""Rule sharegpt_v1: trajectory messages -> rows LLaMA-Factory never drops, or a reject with a reason."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracelake.core.schema import load_schema, schemas_dir
from tracelake.tokens.sharegpt import (
    JOIN,
    REJECT_REASONS,
    ExportReject,
    check_alternation,
    sharegpt_batch,
    to_sharegpt,
)
from tracelake.tokens.special_tokens import ControlTokens

from ..helpers import convert_slots


def m(role: str, content: str = "x") -> dict:
    return {"role": role, "content": content}


def test_plain_alternation_maps_roles_and_keeps_think():
    row = to_sharegpt(
        [
            m("system", "be brief"),
            m("user", "q"),
            m("assistant", "<think>hm</think>a"),
            m("tool", "out"),
            m("assistant", "b"),
        ]
    )
    assert row.system == "be brief"
    assert row.conversations == [
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "<think>hm</think>a"},
        {"from": "observation", "value": "out"},
        {"from": "gpt", "value": "b"},
    ]
    assert (row.merged, row.trimmed) == (0, 0)


def test_consecutive_same_side_messages_merge_or_reject():
    msgs = [m("user", "task"), m("assistant", "a1"), m("user", "obs"), m("user", "summary"), m("assistant", "a2")]
    row = to_sharegpt(msgs)
    assert row.conversations[2] == {"from": "human", "value": "obs" + JOIN + "summary"} and row.merged == 1
    with pytest.raises(ExportReject) as e:
        to_sharegpt(msgs, same_role="reject")
    assert e.value.reason == "consecutive_same_role" and "messages 2 and 3" in e.value.detail


def test_merged_tool_and_user_is_human_all_tool_is_observation():
    assert (
        to_sharegpt([m("user"), m("assistant"), m("tool"), m("tool"), m("assistant")]).conversations[2]["from"]
        == "observation"
    )
    assert (
        to_sharegpt([m("user"), m("assistant"), m("tool"), m("user"), m("assistant")]).conversations[2]["from"]
        == "human"
    )


def test_trailing_prompt_turns_are_trimmed_and_counted():
    row = to_sharegpt([m("user"), m("assistant"), m("user"), m("tool")])
    assert len(row.conversations) == 2 and row.trimmed == 2


@pytest.mark.parametrize(
    "msgs,reason",
    [
        ([], "empty_conversation"),
        ([m("system")], "empty_conversation"),
        ([m("assistant"), m("user"), m("assistant")], "starts_with_assistant"),
        ([m("system"), m("assistant")], "starts_with_assistant"),
        ([m("user"), m("system"), m("assistant")], "system_not_leading"),
        ([m("user"), m("tool")], "no_assistant_turn"),
    ],
)
def test_rejects(msgs, reason):
    with pytest.raises(ExportReject) as e:
        to_sharegpt(msgs)
    assert e.value.reason == reason


def test_none_content_is_empty_text():
    assert to_sharegpt([m("user", None), m("assistant", "a")]).conversations[0]["value"] == ""


ROLES = st.sampled_from(["system", "user", "assistant", "tool"])


@given(st.lists(st.tuples(ROLES, st.text(max_size=5)), max_size=12), st.sampled_from(["merge", "reject"]))
def test_any_message_list_becomes_a_valid_row_or_a_known_reject(pairs, policy):
    msgs = [m(r, c) for r, c in pairs]
    try:
        row = to_sharegpt(msgs, policy)
    except ExportReject as e:
        assert e.reason in REJECT_REASONS
        return
    check_alternation(row.conversations)  # what LLaMA-Factory's converter demands
    body = [x for x in msgs if x["role"] != "system"]
    kept = body[: len(body) - row.trimmed]
    # nothing lost or reordered: the kept messages' texts, in order, are exactly the row's turns
    assert [t["value"] for t in row.conversations] == _joined(kept)
    assert row.merged == len(kept) - len(row.conversations)


def _joined(msgs: list[dict]) -> list[str]:
    side = {"user": 0, "tool": 0, "assistant": 1}
    out: list[tuple[int, list[str]]] = []
    for x in msgs:
        if out and out[-1][0] == side[x["role"]]:
            out[-1][1].append(x["content"])
        else:
            out.append((side[x["role"]], [x["content"]]))
    return [JOIN.join(parts) for _, parts in out]


def test_every_export_reject_reason_is_documented():
    from tracelake.export.rl import REJECT_REASONS as RL_REASONS

    text = (schemas_dir() / "README.md").read_text()
    body = text.split("## Exports\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", body, re.MULTILINE))
    assert documented == set(REJECT_REASONS) | set(RL_REASONS)


def test_export_without_token_counting_says_rows_are_not_length_checked(tmp_path):
    from tracelake.export.sft import SftStats
    from tracelake.tokens.templates import template_slots
    from tracelake.tokens.tokenizer import build_tokenizer, load_tokenizer

    msgs = [{"role": "user", "content": "q " * 400}, {"role": "assistant", "content": "a " * 400}]
    rows = [
        {
            "slot_id": f"s{i}",
            "trajectory_id": "t",
            "task_id": "k",
            "source": "src",
            "task": "x",
            "name": f"x_copy{i:04d}",
            "copy": i,
            "messages": msgs,
        }
        for i in range(2)
    ]
    tok = load_tokenizer(build_tokenizer(tmp_path / "tok"))
    counted, stats = SftStats(), SftStats()
    out, rejects = convert_slots(rows, tokenizer=tok, cutoff_len=10, stats=counted)
    assert out.num_rows == 0 and {r["reason"] for r in rejects} == {"over_cutoff_len"} and counted.length_checked
    out, rejects = convert_slots(
        rows,
        tokenizer=None,
        cutoff_len=10,
        stats=stats,
        control=ControlTokens.of_tokenizer(tok, template_slots("qwen3").markup()),  # no counter to take them from
    )
    assert rejects == [] and out.column("n_tokens").to_pylist() == [None, None]
    assert stats.as_json()["length_checked"] is False


def test_export_counts_the_rows_whose_system_prompt_v1_drops():
    """rows_with_system counts exported rows (upsampled copies included) with a system prompt, after
    rejected rows: the batch holds the ok rows only, so a rejected row must not shift the count."""
    from tracelake.export.sft import SftStats

    def slot(i: int, trajectory: str, messages: list[dict]) -> dict:
        return {
            "slot_id": f"s{i}",
            "trajectory_id": trajectory,
            "task_id": "k",
            "source": "src",
            "task": "x",
            "name": f"x{i}",
            "copy": 0,
            "messages": messages,
        }

    ask = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    sys_ask = [{"role": "system", "content": "be brief"}, *ask]
    rows = [
        slot(0, "bad", [{"role": "assistant", "content": "starts with the answer"}]),  # rejected
        slot(1, "plain", ask),
        slot(2, "sys", sys_ask),
        slot(3, "sys", sys_ask),
    ]  # s3: a copy
    stats = SftStats()
    out, rejects = convert_slots(
        rows,
        tokenizer=None,
        stats=stats,
        control=ControlTokens(tokens=(), in_response=frozenset()),  # plain text: nothing to screen
    )
    assert len(rejects) == 1 and out.num_rows == 3
    assert stats.rows_with_system == 2 == sum(bool(s) for s in out.column("system").to_pylist())


def test_export_recalls_counts_of_conversations_counted_before(tmp_path):
    """A rerun (or a new scale) counts no conversation again: the same tokenizer, template, same_role
    and content hash recall the total; any of them changed counts afresh, to the same exact value."""
    from tracelake.tokens.templates import MODES
    from tracelake.tokens.token_count import TokenCounter
    from tracelake.tokens.tokenizer import build_tokenizer

    def conv(word, n):
        return [
            {"role": "user", "content": f"{word} " * n},
            {"role": "assistant", "content": f"{word}!"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "<think>x</think>ok"},
        ]

    rows = [
        {
            "slot_id": f"s{i}",
            "trajectory_id": f"t{i}",
            "task_id": "k",
            "source": "src",
            "task": "x",
            "name": f"x{i}",
            "copy": 0,
            "messages": conv(w, n),
        }
        for i, (w, n) in enumerate([("a", 5), ("b", 9)])
    ]
    tok_dir, cache = build_tokenizer(tmp_path / "tok"), tmp_path / "cache"

    def export(rows, same_role="merge", template="qwen3"):
        with TokenCounter.open(tok_dir, cache) as counter:
            out, _ = convert_slots(rows, tokenizer=counter, template=template, same_role=same_role)
        return out.column("n_tokens").to_pylist(), counter.stats

    rules = 1 + len(MODES)  # the row's tokens, and the tokens each LLaMA-Factory mode trains on
    first, s1 = export(rows)
    again, s2 = export(rows)
    assert (s1.recalled, s2.recalled, s2.texts) == (0, 2 * rules, 0) and again == first
    plus = rows + [{**rows[0], "slot_id": "s9", "trajectory_id": "t9", "messages": conv("c", 3)}]
    appended, s3 = export(plus)
    assert s3.recalled == 2 * rules and appended[:2] == first
    for other in ({"same_role": "reject"}, {"template": "qwen3_nothink"}):
        assert export(rows, **other)[1].recalled == 0, other
    nothink_fresh = (
        convert_slots(rows, tokenizer=TokenCounter.open(tok_dir), template="qwen3_nothink")[0]
        .column("n_tokens")
        .to_pylist()
    )
    assert export(rows, template="qwen3_nothink")[0] == nothink_fresh != first


MESSAGES = st.lists(st.tuples(ROLES, st.none() | st.text(max_size=5)), max_size=12)


@given(st.lists(MESSAGES, max_size=20), st.sampled_from(["merge", "reject"]), st.integers(0, 3))
def test_the_arrow_batch_converts_exactly_as_row_by_row(trajectories, policy, skip):
    """sharegpt_batch (text kept in Arrow) gives to_sharegpt's rows value for value, and marks not
    ok exactly the rows that to_sharegpt rejects; also on a slice of a larger array."""
    rows = [[{"role": r, "content": c} for r, c in pairs] for pairs in trajectories]
    array = pa.array([[]] * skip + rows, load_schema("trajectories").arrow.field("messages").type).slice(skip)
    batch = sharegpt_batch(array, policy)
    expected = []
    for msgs in rows:
        try:
            expected.append(to_sharegpt(msgs, policy))
        except ExportReject:
            expected.append(None)
    assert batch.ok == [e is not None for e in expected]
    converted = [e for e in expected if e is not None]
    assert batch.system.to_pylist() == [e.system for e in converted]
    assert batch.conversations.to_pylist() == [e.conversations for e in converted]
    assert (batch.merged, batch.trimmed) == ([e.merged for e in converted], [e.trimmed for e in converted])
