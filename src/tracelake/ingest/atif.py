"""ATIF trajectory steps -> chat messages, the way Harbor's trace exporter does.

Harbor's exporter (harbor.utils.traces_utils) makes one training row per *episode*: the steps up to
and including an agent step. `system` and `user` steps become user messages; an agent step becomes
one assistant message: `<think>{reasoning_content}</think>`, the message, then each tool call as
`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, joined by newlines; its observation
becomes the next user message, except after the episode's last agent step. Steps marked
`is_copied_context` (the copied history at the start of a continuation file) are part of the
conversation but do not start episodes. A subagent trajectory is one complete conversation,
observations included.

One addition (renderer `harbor-atif-v1`): terminus-2 with its JSON parser records the model's reply
in ATIF as "Analysis: ...\\nPlan: ..." plus bash_command / mark_task_complete tool calls. The model
actually wrote (and a student must learn to write) the terminus-2 JSON object; we re-serialise it
exactly as terminus-2's prompt asks for it. Harbor's own exports of such runs (its golden
*.traces.json) hold that JSON, which is how this rule is tested.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tracelake.ingest.common import Reject
from tracelake.ingest.validate import check_trajectory

RENDERER = "harbor-atif-v1"
_ANALYSIS_PLAN = re.compile(r"\AAnalysis: (?P<analysis>.*?)\nPlan: (?P<plan>.*)\Z", re.DOTALL)
_TERMINUS_TOOLS = {"bash_command", "mark_task_complete"}


def text_of(content: Any, where: str) -> str:
    """Harbor's normalize_message_content: str as is, [{'text': ...}] parts joined, else JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if any(isinstance(p, dict) and p.get("type") == "image" for p in content):
            raise Reject("multimodal_content", f"{where} holds an image part")
        if content and isinstance(content[0], dict) and "text" in content[0]:
            val = content[0]["text"]
            return val if isinstance(val, str) else json.dumps(val, ensure_ascii=False)
    return json.dumps(content, ensure_ascii=False)


def _terminus_json(step: dict[str, Any], message: str) -> str | None:
    """The terminus-2 JSON reply behind an 'Analysis/Plan + tool calls' step, or None."""
    m = _ANALYSIS_PLAN.match(message)
    calls = step.get("tool_calls") or []
    if not m or any(c.get("function_name") not in _TERMINUS_TOOLS for c in calls):
        return None
    reply = {
        "analysis": m["analysis"],
        "plan": m["plan"],
        "commands": [c.get("arguments", {}) for c in calls if c.get("function_name") == "bash_command"],
        "task_complete": any(c.get("function_name") == "mark_task_complete" for c in calls),
    }
    return json.dumps(reply, indent=2, ensure_ascii=False)


def assistant_text(step: dict[str, Any], terminus_json: bool) -> str:
    parts = []
    if step.get("reasoning_content"):
        parts.append(f"<think>{step['reasoning_content']}</think>")
    message = text_of(step.get("message"), f"step {step.get('step_id')}")
    recovered = _terminus_json(step, message) if terminus_json else None
    if recovered is not None:
        parts.append(recovered)
    else:
        if message:
            if "</think>" in message and "<think>" not in message:
                message = "<think>" + message  # vLLM drops the opening tag the prompt supplied
            parts.append(message)
        for call in step.get("tool_calls") or []:
            obj = {"name": call.get("function_name"), "arguments": call.get("arguments", {})}
            parts.append(f"<tool_call>\n{json.dumps(obj, ensure_ascii=False)}\n</tool_call>")
    return "\n".join(parts)


def observation_text(step: dict[str, Any]) -> str | None:
    results = (step.get("observation") or {}).get("results") or []
    texts = [
        text_of(r["content"], f"step {step.get('step_id')} observation")
        for r in results
        if isinstance(r, dict) and "content" in r
    ]
    return "\n".join(texts) if texts else None


def _check_steps(doc: Any, where: str) -> list[dict[str, Any]]:
    """The steps, once every field read below has its declared type (validate.py): the code here
    may then trust them."""
    return check_trajectory(doc, where)


def uses_terminus_json(doc: dict[str, Any]) -> bool:
    agent = doc.get("agent") or {}
    return agent.get("name") == "terminus-2" and (agent.get("extra") or {}).get("parser") == "json"


def render(steps: list[dict[str, Any]], terminus_json: bool, final_observation: bool) -> list[dict[str, str]]:
    """Messages of the given steps; the last agent step's observation only if final_observation."""
    agent_idx = [i for i, s in enumerate(steps) if s["source"] == "agent"]
    messages: list[dict[str, str]] = []
    for i, step in enumerate(steps):
        if step["source"] in ("system", "user"):
            messages.append({"role": "user", "content": text_of(step.get("message"), f"step {step.get('step_id')}")})
            continue
        messages.append({"role": "assistant", "content": assistant_text(step, terminus_json)})
        if final_observation or i != agent_idx[-1]:
            obs = observation_text(step)
            if obs is not None:
                messages.append({"role": "user", "content": obs})
    return messages


def episode_ends(steps: list[dict[str, Any]]) -> list[int]:
    """Indices of the agent steps that end an episode (copied context does not)."""
    return [i for i, s in enumerate(steps) if s["source"] == "agent" and not s.get("is_copied_context")]


def main_conversation(docs: list[tuple[str, Any]]) -> tuple[list[dict[str, str]], int]:
    """Last episode of a main trajectory and its continuations, and the number of episodes in all.

    `docs` is the chain [(where, parsed trajectory.json), (where, parsed trajectory.cont-1.json), ...].
    """
    n_episodes, last = 0, None
    for where, doc in docs:
        steps = _check_steps(doc, where)
        ends = episode_ends(steps)
        n_episodes += len(ends)
        if ends:
            last = render(steps[: ends[-1] + 1], uses_terminus_json(doc), final_observation=False)
    if last is None:
        raise Reject("empty_conversation", f"{docs[0][0]} has no agent step")
    return last, n_episodes


def subagent_conversation(where: str, doc: Any, parent_terminus_json: bool) -> list[dict[str, str]]:
    """A subagent trajectory as one complete conversation (every observation kept).

    terminus-2's summarization subagents (agent name terminus-2-summarization-*) replay the parent's
    history, so they take the parent's reply format.
    """
    steps = _check_steps(doc, where)
    if not any(s["source"] == "agent" for s in steps):
        raise Reject("empty_conversation", f"{where} has no agent step")
    name = str((doc.get("agent") or {}).get("name") or "")
    terminus_json = uses_terminus_json(doc) or (parent_terminus_json and name.startswith("terminus-2-"))
    return render(steps, terminus_json, final_observation=True)
