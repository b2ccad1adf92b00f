"""The filter rules, each declared once, in the order the filter applies them.

A rule is its SQL (sql/filter_rules/<query>.sql: a query over the view `candidates` returning the
(trajectory_id, detail) pairs it drops) and one `FilterRule` below: its versioned name, the
params.yaml `filter.<key>` that switches it on (name, type, default, help), what it drops, an
example of its detail, and what it needs. Everything else follows from RULES: FilterParams' rule
keys (curate/filter_params.py), the filter's order (curate/filter.py), the funnel's columns (`tracelake
status`, the report), the pool's params in the viewer, the RL export's task-level rules, and the
rule table of docs/curation.md (`python -m tracelake.curate.filter_rules --docs docs/curation.md`
writes it; a test holds it equal).

Adding a rule: write its SQL file, add a FilterRule here (where it belongs in the order), test it.
A rule switched off by its default changes nothing a build makes but the params its manifests
record. Change the name (its version) when the meaning changes.

Pure declarations: checking params imports this module, never the filter's code.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Literal

from pydantic import Field

from tracelake.core.doc_tables import DocTable, cell


@dataclass(frozen=True)
class Param:
    """A `filter.<name>` key of params.yaml: its type (pydantic, strict), default and help line."""

    name: str
    type: Any
    default: Any
    help: str

    def shown_default(self) -> str:
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if self.default is None:
            return "null"
        if isinstance(self.default, (list, tuple)):
            return "[" + ", ".join(map(str, self.default)) + "]"
        return str(self.default)


@dataclass(frozen=True)
class FilterRule:
    name: str  # versioned: a change of meaning is a new name
    label: str  # the funnel's column header (`tracelake status`)
    drops: str  # a row is dropped when ... (docs)
    detail: str  # an example of the `detail` it records (docs)
    param: Param | None  # the key that switches it on and sets its threshold (None: `reads` decide)
    enabled: Callable[[Any], bool]  # on FilterParams
    bind: Callable[[Any], dict[str, Any]] = lambda p: {}  # the query's bound parameters
    reads: tuple[str, ...] = ()  # other params it depends on: `filter.tokenizer`, `export_sft.same_role`, `dedup`
    query: str = ""  # sql/filter_rules/<query>.sql; default: the name without its version
    needs_counts: bool = False  # n_tokens must exist before it runs (counting renders each row as the export does)
    control_patterns: bool = False  # also binds $anywhere and $in_response (tokens/special_tokens.py)
    task_level: bool = False  # drops every rollout of a task: the RL export applies it to tasks too
    check: Callable[[Any], tuple[str, str] | None] = field(default=lambda p: None)  # (key, message) when refused

    @property
    def sql_name(self) -> str:
        return self.query or re.sub(r"_v[0-9]+$", "", self.name)


def _max_tokens_needs_counts(p: Any) -> tuple[str, str] | None:
    if p.max_tokens is not None and not p.count_tokens:
        return "max_tokens", f"max_tokens {p.max_tokens} needs count_tokens: true (or set max_tokens: null)"
    return None


RULES: tuple[FilterRule, ...] = (
    FilterRule(
        "contaminated_v1",
        label="contam",
        drops="the task is in `contamination` (stage `dedup`: its normalised 13-grams, or those of one of "
        "its rollouts' opening turns (`task_turns_v1`: system and user messages before the first assistant "
        "turn), cover ≥ `decontaminate.ngram_min_share` of a benchmark item's or of its own, or its "
        "embedding is within `decontaminate.embedding_threshold` of an item's): every rollout of it",
        detail='benchmark planted item benchmark-003: shares 100% of its word n-grams, e.g. "…"',
        param=Param("contaminated", bool, True, "drop the rollouts of tasks the dedup stage found in a benchmark"),
        enabled=lambda p: p.contaminated,
        reads=("decontaminate",),
        task_level=True,
    ),
    FilterRule(
        "timeout_v1",
        label="timeout",
        drops="`exception_type` is in `filter.timeout_exceptions` (NULL never matches)",
        detail="exception AgentTimeoutError",
        param=Param(
            "timeout_exceptions",
            list[Annotated[str, Field(min_length=1)]],
            ("AgentTimeoutError",),
            "drop runs that ended in one of these exceptions ([]: none)",
        ),
        enabled=lambda p: bool(p.timeout_exceptions),
        bind=lambda p: {"exceptions": list(p.timeout_exceptions)},
    ),
    FilterRule(
        "subagent_v1",
        label="subagent",
        drops="`is_subagent` (`trace_source` is not `main`)",
        detail="trace_source summarization-1-summary",
        param=Param("drop_subagents", bool, True, "drop subagent traces (trace_source other than main)"),
        enabled=lambda p: p.drop_subagents,
    ),
    FilterRule(
        "earlier_episode_v2",
        label="episode",
        drops="`episodes: last` and another row of the same trial (source, run_id, agent, model, trial_name, "
        "trace_source: rows of different agents, models or runs that share a trial name, as Harbor's goldens "
        "all share `NORMALIZED_TRIAL_NAME`, are different trials) has a later episode number, over all "
        "ingested rows; trial names shared across agents or models are counted in `metrics/filter.json` "
        "(`shared_trial_names`) and a summary line",
        detail="episode 3 of a trial whose last episode is 7",
        param=Param(
            "episodes",
            Literal["last", "all"],
            "last",
            "last: keep each trial's last episode row (trace tables exported with every episode); all: keep every one",
        ),
        enabled=lambda p: p.episodes == "last",
    ),
    FilterRule(
        "min_assistant_turns_v1",
        label="min_turns",
        drops="`n_assistant_turns < filter.min_assistant_turns`",
        detail="3 assistant turns < 5",
        param=Param(
            "min_assistant_turns", Annotated[int, Field(ge=0)], 5, "drop rollouts with fewer assistant turns (0: off)"
        ),
        enabled=lambda p: p.min_assistant_turns > 0,
        bind=lambda p: {"min_turns": p.min_assistant_turns},
    ),
    FilterRule(
        "success_only_v1",
        label="success",
        drops="`success_only` and the reward is NULL or ≤ 0",
        detail="no reward (no verifier result)",
        param=Param("success_only", bool, False, "keep only runs the verifier rewarded (reward > 0)"),
        enabled=lambda p: p.success_only,
    ),
    FilterRule(
        "special_token_in_text_v1",
        label="special",
        drops="`filter.special_tokens: reject` and a message's text holds a literal that `filter.tokenizer` "
        "reads as a control token, other than an assistant message's own thought and tool-call words "
        "([schemas/README.md](../schemas/README.md#control-tokens-in-message-text)); the first such message "
        "is named",
        detail="user message 4 holds <|im_end|>",
        param=Param(
            "special_tokens",
            Literal["reject", "escape"],
            "reject",
            "a control-token literal in message text (<|im_end|> in a tool result): reject drops the row; "
            "escape keeps it, the literal escaped (zwsp_escape_v1) in the counted and the exported text alike",
        ),
        enabled=lambda p: p.special_tokens == "reject",
        reads=("filter.tokenizer",),
        control_patterns=True,
    ),
    FilterRule(
        "not_exportable_v1",
        label="unexportable",
        drops="with `filter.count_tokens`: the SFT export could not make a LLaMA-Factory example of the row "
        "(any `sft` reason of [the export rejects](../schemas/README.md#exports) but `over_cutoff_len`, "
        "found while its rendering is counted)",
        detail="starts_with_assistant: the first non-system message is an assistant message",
        param=None,
        enabled=lambda p: p.count_tokens,
        reads=("filter.count_tokens", "export_sft.same_role"),
        needs_counts=True,
    ),
    FilterRule(
        "max_tokens_v1",
        label="max_tokens",
        drops="`n_tokens > filter.max_tokens` (`lf_input_tokens_v2`: the length of what LLaMA-Factory encodes "
        "for the row in the trained rendering, with `filter.tokenizer`: the export's `n_tokens`)",
        detail="40211 tokens > 32768",
        param=Param(
            "max_tokens",
            Annotated[int | None, Field(ge=1)],
            32768,
            "drop conversations longer than this; at most train.sft.cutoff_len; null: no limit",
        ),
        enabled=lambda p: p.max_tokens is not None,
        bind=lambda p: {"max_tokens": p.max_tokens},
        reads=("filter.tokenizer", "filter.count_tokens"),
        needs_counts=True,
        check=_max_tokens_needs_counts,
    ),
    FilterRule(
        "near_duplicate_v1",
        label="near_dup",
        drops="the task is a near-duplicate of its cluster's representative in `task_clusters` (`dropped`: "
        "`dedup.keep: one` for its source); the representative's rollouts stay",
        detail="near duplicate of superuser-0012 (3f0c…) by minhash 0.8214",
        param=Param("near_duplicates", bool, True, "drop the rollouts of near-duplicate tasks (dedup.keep: one)"),
        enabled=lambda p: p.near_duplicates,
        reads=("dedup",),
        task_level=True,
    ),
    FilterRule(
        "duplicate_conversation_v1",
        label="dup_conv",
        drops="another surviving row has the same messages (`conversation_sha256`) and a smaller id",
        detail="same conversation as 1f3c…",
        param=Param("dedup_conversations", bool, True, "drop exact duplicate conversations (keeps the smallest id)"),
        enabled=lambda p: p.dedup_conversations,
    ),
)

# filter.<key>s no single rule owns (curate/filter_params.py declares them)
SHARED_KEYS = ("tokenizer", "count_tokens")


def label(name: str) -> str:
    """The funnel header of a rule a manifest names; a rule no longer declared (an older pool) shows whole."""
    return next((r.label for r in RULES if r.name == name), name)


# --- the docs' rule table ------------------------------------------------------------------------------


def docs_table() -> str:
    """The rule table of docs/curation.md: every rule in order, what it drops, its params, a detail."""
    lines = ["| rule | a row is dropped when | params | detail example |", "|---|---|---|---|"]
    for r in RULES:
        params = [f"`filter.{r.param.name}` (default `{cell(r.param.shown_default())}`)"] if r.param else []
        params += [f"`{k}`" for k in r.reads]
        lines.append(f"| `{r.name}` | {cell(r.drops)} | {', '.join(params)} | `{cell(r.detail)}` |")
    return "\n".join(lines)


DOCS = DocTable("filter rules", "tracelake.curate.filter_rules", "docs/curation.md", docs_table)

if __name__ == "__main__":
    sys.exit(DOCS.main())
