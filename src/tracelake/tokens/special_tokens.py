"""Control-token literals in message text: which strings a tokenizer reads as control tokens, where
one is hostile, and a reversible escape (rule `zwsp_escape_v1`).

A fast tokenizer matches every added token (tokenizer.json `added_tokens`) in the raw text before
BPE and gives it its one id, wherever the text came from. A terminal that printed `<|im_end|>`
therefore ends a turn in the middle of a tool result when that output is trained on: the model
learns fake turn boundaries, and a token count counts the literal as one token. LLaMA-Factory's
`split_special_tokens` is no remedy: it encodes the template's own markup with the same call, so it
would split the real `<|im_start|>` too.

The control tokens of one (tokenizer, chat template) pair are:

- every added token marked `special`, and
- every added token that the chat template writes (its markup: turn headers, thought words,
  tool-call words, and the tokenizer's own `chat_template`), special or not (Qwen3's `<think>` and
  `<tool_call>` are plain added tokens, and its template uses them).

Other plain added tokens (Qwen's FIM tokens, a vocabulary's added words) are the tokenizer's
ordinary vocabulary for such text, read as the base model was trained to read them.

A literal is hostile unless it is part of what the model itself writes inside a response: the
template's thought and tool-call words (`<think>`, `</tool_call>`, ...) in an assistant turn are the
model's own output and stay. Everywhere else (system, user and tool text, and any other control
token in an assistant turn) a literal is hostile.

Escape (`zwsp_escape_v1`): a zero-width space (U+200B, MARK) goes after the first character of each
hostile literal (`<|im_end|>` -> `<` MARK `|im_end|>`), which no tokenizer here matches as an added
token. To keep it reversible, every form already written with marks (`<` MARK* `|im_end|>`, any control
token, in any turn) gets one more; `unescape` removes one mark from each marked form. So
`unescape(escape(t)) == t` for every text, and a text with neither literals nor marked forms is
left exactly as it was.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelake.core.errors import BadParams, check

ESCAPE_RULE = "zwsp_escape_v1"
MARK = "\u200b"  # ZERO WIDTH SPACE
NEVER = "$.^"  # a pattern no text matches (Python re and RE2 alike)
_PUNCTUATION = frozenset("\\.^$|?*+()[]{}/-#&~:!,;=<>\"'%@`")


@dataclass(frozen=True)
class ChatMarkup:
    """What a chat template writes itself: `text`, every string it puts around messages; `response`,
    the words it lets a response carry (thought and tool-call words), which an assistant turn may hold."""

    text: tuple[str, ...]
    response: tuple[str, ...] = ()


def literal(token: str) -> str:
    """`token` as a regex matching it literally, valid for Python's re and for RE2 (DuckDB, Arrow):
    only ASCII punctuation is escaped (RE2 refuses an escaped space or letter)."""
    return "".join("\\" + ch if ch in _PUNCTUATION else ch for ch in token)


def alternation(tokens: Iterable[str]) -> str:
    """One pattern for any of `tokens`, longest first (leftmost, then longest), or NEVER for none."""
    ordered = sorted(set(tokens), key=lambda t: (-len(t), t))
    return "|".join(map(literal, ordered)) if ordered else NEVER


@dataclass(frozen=True)
class ControlTokens:
    """The control tokens of one tokenizer and chat template, and how to find and escape their literals."""

    tokens: tuple[str, ...]  # sorted
    in_response: frozenset[str]  # those an assistant turn may hold (the template's response words)

    @classmethod
    def of(cls, tokenizer_json: dict[str, Any], markup: ChatMarkup, chat_template: str = "") -> ControlTokens:
        """From a tokenizer.json document, the chat template's markup and the tokenizer's own chat_template."""
        written = "\0".join([*markup.text, *markup.response, chat_template])
        tokens = sorted(
            {
                t["content"]
                for t in tokenizer_json.get("added_tokens") or []
                if t.get("content") and (t.get("special") or t["content"] in written)
            }
        )
        response = "\0".join(markup.response)
        return cls(tuple(tokens), frozenset(t for t in tokens if t in response))

    @classmethod
    def open(cls, tokenizer_json: Path, markup: ChatMarkup) -> ControlTokens:
        """From a tokenizer.json file (tokens/tokenizer.py `tokenizer_file` finds it in a directory) and
        the chat template beside it (tokenizer_config.json or chat_template.jinja), when there is one."""
        return cls.of(json.loads(tokenizer_json.read_bytes()), markup, own_chat_template(tokenizer_json.parent))

    @classmethod
    def of_tokenizer(cls, tokenizer: Any, markup: ChatMarkup) -> ControlTokens:
        """From a loaded `tokenizers.Tokenizer` (its added tokens; no tokenizer_config.json to read)."""
        return cls.of(json.loads(tokenizer.to_str()), markup)

    @functools.cached_property
    def _patterns(self) -> dict[bool, str]:
        return {False: alternation(self.tokens), True: alternation(t for t in self.tokens if t not in self.in_response)}

    def pattern(self, response: bool) -> str:
        """The regex (Python re and RE2) matching a hostile literal in a response or in any other text."""
        return self._patterns[response]

    def hostile(self, text: str, response: bool) -> list[str]:
        """The hostile literals in `text`, in order (an assistant turn's text when `response`)."""
        return _compiled(self._patterns[response]).findall(text)

    @functools.cached_property
    def _escape_rules(self) -> dict[bool, list[tuple[str, str]]]:
        _check_escapable(self.tokens)
        return {response: self._rules(response) for response in (False, True)}

    def escape_rules(self, response: bool) -> list[tuple[str, str]]:
        """(pattern, rewrite) pairs applied in turn: the escape as regex replacements, the same strings
        for Python's re.sub and RE2's GlobalReplace (Arrow's replace_substring_regex). BadParams when a
        control token cannot be escaped (_check_escapable)."""
        return self._escape_rules[response]

    def _rules(self, response: bool) -> list[tuple[str, str]]:
        marked_only = self.in_response if response else frozenset()
        rules = []
        for first in sorted({t[0] for t in self.tokens}):
            for tokens, marks in (
                ([t for t in self.tokens if t[0] == first and t not in marked_only], "*"),
                ([t for t in self.tokens if t[0] == first and t in marked_only], "+"),
            ):
                if tokens:
                    rests = alternation(t[1:] for t in tokens)
                    rules.append((f"({literal(first)})({MARK}{marks})({rests})", f"\\1{MARK}\\2\\3"))
        return rules

    def escape(self, text: str, response: bool) -> str:
        """`text` with every hostile literal escaped and every marked form given one more mark."""
        rules = self.escape_rules(response)  # BadParams first, whatever the text
        if MARK not in text and not _compiled(self._patterns[response]).search(text):
            return text
        for pattern, rewrite in rules:
            text = _compiled(pattern).sub(rewrite, text)
        check(not self.hostile(text, response), f"{ESCAPE_RULE} left a control token in {text[:80]!r}")
        return text

    @functools.cached_property
    def _unescape_rules(self) -> list[str]:
        return [
            f"({literal(first)}){MARK}({MARK}*)({alternation(t[1:] for t in self.tokens if t[0] == first)})"
            for first in sorted({t[0] for t in self.tokens})
        ]

    def unescape(self, text: str) -> str:
        """The text `escape` was given: one mark removed from every marked form of a control token."""
        if MARK not in text:
            return text
        for pattern in self._unescape_rules:
            text = _compiled(pattern).sub("\\1\\2\\3", text)
        return text

    def escape_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each message with its content escaped (an assistant message's as a response)."""
        return [
            {**m, "content": self.escape(m["content"], m["role"] == "assistant")} if m.get("content") else m
            for m in messages
        ]

    def fingerprint(self) -> str:
        """16 hex of sha256 over the tokens and those a response may hold: part of a count's cache key."""
        doc = json.dumps([list(self.tokens), sorted(self.in_response)], ensure_ascii=False)
        return hashlib.sha256(doc.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line for a manifest's formulas: how many control tokens, and those a response may hold."""
        kept = " ".join(sorted(self.in_response)) or "none"
        return f"{len(self.tokens)} control tokens ({self.fingerprint()}); in an assistant turn allowed: {kept}"


def own_chat_template(directory: Path) -> str:
    """The tokenizer directory's own chat template text: tokenizer_config.json `chat_template` (a
    string, or a list of named templates) and chat_template.jinja, joined; empty when there is none."""
    parts: list[str] = []
    config = directory / "tokenizer_config.json"
    if config.is_file():
        try:
            value = json.loads(config.read_bytes()).get("chat_template")
        except (ValueError, AttributeError) as exc:
            raise BadParams(f"{config} is not a JSON object: {exc}") from exc
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(str(t.get("template", "")) for t in value if isinstance(t, dict))
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        parts.append(jinja.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def _check_escapable(tokens: list[str]) -> None:
    """The escape splits a literal after its first character: that needs two characters, no mark, and
    no control token inside another (else splitting one could leave or make the other)."""
    for t in tokens:
        if len(t) < 2 or MARK in t:
            raise BadParams(
                f"control token {t!r} cannot be escaped ({ESCAPE_RULE}): it is one character or holds U+200B"
            )
        inner = next((u for u in tokens if u != t and u in t), None)
        if inner is not None:
            raise BadParams(f"control token {t!r} contains control token {inner!r}: {ESCAPE_RULE} cannot split it")


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    found = _PATTERNS.get(pattern)
    if found is None:
        found = _PATTERNS[pattern] = re.compile(pattern)
    return found
