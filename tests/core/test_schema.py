"""Schemas: the type language, validation, and hypothesis round-trips schema -> Parquet -> back."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracelake.core.errors import SchemaViolation
from tracelake.core.schema import TABLES, load_schema, parse_type
from tracelake.core.tables import PartedTableWriter, TableWriter, read_table
from tracelake.ingest.common import ROLES, trajectory_row


def test_type_language():
    assert parse_type("list<struct<role: string, content: string>>") == pa.list_(
        pa.struct([("role", pa.string()), ("content", pa.string())])
    )
    assert parse_type("int32") == pa.int32()
    for bad in ("list<string", "struct<a string>", "float128", "string extra"):
        with pytest.raises(ValueError):
            parse_type(bad)


def test_every_table_declared_with_docs_and_key():
    for name in TABLES:
        s = load_schema(name)
        assert s.key == s.columns[0] and all(s.docs[c] is not None for c in s.columns)
        assert len(s.fingerprint) == 16


def test_validation_names_the_problem():
    s = load_schema("scores")
    good = {
        "score_id": "a",
        "task_id": "t",
        "scorer": "x_v1",
        "model": None,
        "prompt_sha256": None,
        "sampling": None,
        "score": 1.0,
    }
    s.from_rows([good])
    with pytest.raises(SchemaViolation, match="scores.score: null"):
        s.from_rows([dict(good, score=None)])
    with pytest.raises(SchemaViolation, match="wrong fields"):
        s.from_rows([{k: v for k, v in good.items() if k != "model"}])
    with pytest.raises(SchemaViolation, match="columns differ"):
        s.validate(pa.table({"score_id": ["a"]}))


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
opt_text = st.none() | text
message = st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": text})
conversation = st.lists(message, min_size=1, max_size=6).filter(lambda ms: any(m["role"] == "assistant" for m in ms))


@st.composite
def trajectory_rows(draw):
    return trajectory_row(
        source=draw(st.sampled_from(["swesmith", "tezos", "ünïcode-src"])),
        task=draw(text.filter(bool)),
        messages=draw(conversation),
        trace_source=draw(st.sampled_from(["main", "summarization-1-summary"])),
        run_id=draw(opt_text),
        trial_name=draw(opt_text),
        episode=draw(opt_text),
        n_episodes=draw(st.none() | st.integers(0, 10_000)),
        agent=draw(opt_text),
        model=draw(opt_text),
        model_provider=draw(opt_text),
        date=draw(opt_text),
        result=draw(opt_text),
        reward=draw(st.none() | st.floats(allow_nan=False)),
        exception_type=draw(opt_text),
        renderer="test-v1",
        provenance=[{"path": draw(text), "sha256": "0" * 64}],
        row_index=draw(st.none() | st.integers(0, 2**40)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(trajectory_rows(), min_size=0, max_size=8))
def test_trajectories_round_trip(tmp_path_factory, rows):
    d = tmp_path_factory.mktemp("rt")
    writer = PartedTableWriter(d, load_schema("trajectories"))
    for r in rows:
        writer.write(r)
    info = writer.close()
    back = read_table(d, "trajectories").to_pylist()
    assert back == rows  # every value, ids included, survives Parquet unchanged
    assert [r["trajectory_id"] for r in back] == [r["trajectory_id"] for r in rows]
    # ids are recomputable from content: rebuilding each row from its own fields gives the same id
    for r in back:
        again = trajectory_row(
            **{
                k: r[k]
                for k in (
                    "source",
                    "task",
                    "messages",
                    "trace_source",
                    "run_id",
                    "trial_name",
                    "episode",
                    "n_episodes",
                    "agent",
                    "model",
                    "model_provider",
                    "date",
                    "result",
                    "reward",
                    "exception_type",
                    "renderer",
                    "provenance",
                    "row_index",
                )
            }
        )
        assert again["trajectory_id"] == r["trajectory_id"] and again["task_id"] == r["task_id"]
    assert info.rows == len(rows)


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {
                "source": text,
                "input_kind": st.sampled_from(["harbor", "traces", "tasks"]),
                "path": text,
                "row_index": st.none() | st.integers(0, 2**40),
                "trace_source": opt_text,
                "reason": st.sampled_from(["unparsable_json", "unknown_role"]),
                "detail": text,
            }
        ),
        max_size=5,
    )
)
def test_rejects_round_trip(tmp_path_factory, rows):
    from tracelake.core.hashing import content_id

    rows = [{"reject_id": content_id("reject", r), **r} for r in rows]
    d = tmp_path_factory.mktemp("rj")
    w = TableWriter(d, load_schema("rejects"))
    for r in rows:
        w.write(r)
    w.close()
    assert read_table(d, "rejects").to_pylist() == rows


def _documented(section: str) -> set[str]:
    """The names in the first column of the tables under one '## section' of schemas/README.md."""
    from tracelake.core.schema import schemas_dir

    text = (schemas_dir() / "README.md").read_text()
    body = text.split(f"# {section}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", body, re.MULTILINE))


def test_schemas_readme_documents_every_reject_reason():
    from tracelake.ingest.common import REASONS

    assert _documented("Reject reasons") == set(REASONS)


def test_schemas_readme_documents_every_table():
    # the filter rules' table is docs/curation.md's, written from their declarations
    # (tests/curate/test_filter_rules.py holds it equal)
    assert _documented("The data contract") == set(TABLES)
