"""The declared shape of what ingest reads, checked before it is used.

A field of the wrong type must become a reject (`invalid_field`), never an AttributeError that
aborts the whole source nor a Python repr in a column (an exception name given as an object would
slip past the timeout filter). The checks are plain isinstance tests made once per file: cheaper than
building models, and they name the field. They follow the ATIF spec (Harbor
docs/rfcs/0001-trajectory-format.md) for every field ingest reads, and are as lenient as Harbor's own
exporter where it is (a message may also be a list of content parts; tool call arguments may be a
JSON string, as OpenAI writes them).

Values that ingest serialises again (tool call arguments, content parts) may be nested at most
MAX_DEPTH deep, checked here without Python recursion: json.dumps would otherwise stop with a
RecursionError at a depth that depends on the caller's stack.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from tracelake.ingest.common import Reject

MAX_DEPTH = 254  # what orjson.dumps accepts
STEP_SOURCES = ("system", "user", "agent")


def json_kind(v: Any) -> str:
    """The JSON type of a parsed value, for messages ("a number", "a list")."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "list" if isinstance(v, list) else "object" if isinstance(v, dict) else type(v).__name__


def show(v: Any, limit: int = 60) -> str:
    """A value as a reject's detail shows it: short, and never a recursive repr of a container."""
    if isinstance(v, str):
        return repr(v[:limit]) + ("..." if len(v) > limit else "")
    if v is None or isinstance(v, (bool, float)) or (isinstance(v, int) and abs(v) < 10**18):
        return repr(v)
    kind = json_kind(v)
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


class _Wrong(Exception):
    """A field of the wrong type, raised deep in a step; the caller adds where the step is (the
    location is only formatted on failure: this check runs on every step of every trajectory)."""

    def __init__(self, path: str, value: Any, what: str, reason: str = "invalid_field"):
        self.path, self.value, self.what, self.reason = path, value, what, reason


# Exact types, as JSON parsers build them (a bool is not an integer here).
_STR, _INT, _BOOL, _LIST, _DICT = (str,), (int,), (bool,), (list,), (dict,)
_TEXT, _ARGS = (str, list), (dict, str)
_AGENT_FIELDS = (("name", _STR, "a string"), ("model_name", _STR, "a string"), ("extra", _DICT, "an object"))
_STEP_FIELDS = (
    ("step_id", _INT, "an integer"),
    ("message", _TEXT, "a string"),
    ("reasoning_content", _STR, "a string"),
    ("is_copied_context", _BOOL, "a boolean"),
    ("tool_calls", _LIST, "a list"),
    ("observation", _DICT, "an object"),
)


def _get(obj: dict[str, Any], key: str, types: tuple[type, ...], what: str) -> Any:
    """obj[key] when it is absent, null or exactly one of `types`, else _Wrong."""
    v = obj.get(key)
    if v is not None and type(v) not in types:
        raise _Wrong(key, v, what)
    return v


def _nested(v: Any, path: str) -> None:
    """A list or object nested at most MAX_DEPTH deep: orjson.dumps (C, no recursion limit of
    Python's) refuses deeper values, and is the fastest way to look."""
    if type(v) in (list, dict):
        try:
            orjson.dumps(v)
        except orjson.JSONEncodeError as e:
            raise _Wrong(path, v, f"nested at most {MAX_DEPTH} levels deep ({e})", "json_too_deep") from None


def _check_step(s: dict[str, Any]) -> None:
    source = s.get("source")
    if type(source) is not str:
        raise _Wrong("source", source, "a string")
    if source not in STEP_SOURCES:
        raise _Wrong("source", source, "one of system, user, agent (the ATIF step sources)", "unknown_role")
    for key, types, what in _STEP_FIELDS:
        v = s.get(key)
        if v is not None and type(v) not in types:
            raise _Wrong(key, v, what)
    _nested(s.get("message"), "message")
    for j, call in enumerate(s.get("tool_calls") or ()):
        try:
            if type(call) is not dict:
                raise _Wrong("", call, "an object")
            _get(call, "function_name", _STR, "a string")
            _nested(_get(call, "arguments", _ARGS, "an object"), "arguments")
        except _Wrong as w:
            w.path = f"tool call {j} {w.path}".rstrip()
            raise
    observation = s.get("observation")
    if observation is not None:
        for j, result in enumerate(_get(observation, "results", _LIST, "a list") or ()):
            try:
                if type(result) is not dict:
                    raise _Wrong("", result, "an object")
                _nested(_get(result, "content", _TEXT, "a string"), "content")
            except _Wrong as w:
                w.path = f"observation result {j} {w.path}".rstrip()
                raise


def check_trajectory(doc: Any, where: str) -> list[dict[str, Any]]:
    """The steps of an ATIF trajectory whose every field that ingest reads has its declared type."""
    if not isinstance(doc, dict):
        raise Reject("invalid_field", f"{where} is a JSON {json_kind(doc)}, not an object")
    try:
        agent = _get(doc, "agent", _DICT, "an object")
        for key, types, what in _AGENT_FIELDS if agent is not None else ():
            v = agent.get(key)
            if v is not None and type(v) not in types:
                raise _Wrong(f"agent {key}", v, what)
    except _Wrong as w:
        raise Reject(w.reason, f"{where} {w.path} is {show(w.value)}, not {w.what}") from None
    steps = doc.get("steps")
    if steps is None:
        raise Reject("missing_required_field", f"{where} has no 'steps'")
    if type(steps) is not list or not all(type(s) is dict for s in steps):
        raise Reject("invalid_field", f"{where} steps is {show(steps)}, not a list of objects")
    for i, step in enumerate(steps):
        try:
            _check_step(step)
        except _Wrong as w:
            raise Reject(w.reason, f"{where} step {i} {w.path} is {show(w.value)}, not {w.what}") from None
    return steps


def optional_str(v: Any, name: str) -> str | None:
    """A name-like field (exception type, model, date): a string or null, never str() of anything."""
    if v is not None and not isinstance(v, str):
        raise Reject("invalid_field", f"{name} is {show(v)}, not a string")
    return v


def finite_reward(v: Any, name: str) -> float | None:
    """A reward: null, a number or a numeric string, finite (as trace ingest requires of `result`)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise Reject("invalid_field", f"{name} is {show(v)}, not a number")
    try:
        reward = float(v)
    except (ValueError, OverflowError):
        raise Reject("invalid_field", f"{name} is {show(v)}, not a number") from None
    if not math.isfinite(reward):
        raise Reject("invalid_field", f"{name} is {show(v)}, not a finite reward")
    return reward
