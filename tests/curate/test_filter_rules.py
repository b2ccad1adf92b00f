"""The filter rules are declared once (curate/filter_rules.py): FilterParams' rule keys, the order,
the SQL files, the funnel's columns, the viewer's pool params, the RL export's task rules and the
docs' rule table all follow from RULES. The last test adds a rule to a scratch copy of the built
sample, its SQL file and its declaration and nothing else, and finds it in the funnel, `tracelake
status`, the viewer, the report and the docs table."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tracelake.core.assets import asset_dir
from tracelake.core.tables import read_table
from tracelake.curate import filter_rules
from tracelake.curate.filter_params import FilterParams
from tracelake.curate.filter_rules import RULES, SHARED_KEYS
from tracelake.export.rl import TASK_RULES

from ..helpers import ROOT, run_stage, run_tracelake, view_page, written_doc_table


def test_every_rule_has_its_sql_and_every_sql_file_a_rule():
    files = {p.stem for p in (asset_dir("sql") / "filter_rules").glob("*.sql")}
    assert {r.sql_name for r in RULES} == files
    names = [r.name for r in RULES]
    assert len(set(names)) == len(names) and all(n.rsplit("_v", 1)[1].isdigit() for n in names)
    labels = [r.label for r in RULES]
    assert len(set(labels)) == len(labels), "two funnel columns with one header"


def test_filter_params_are_the_shared_keys_and_each_rules_own():
    own = [r.param.name for r in RULES if r.param is not None]
    assert list(FilterParams.model_fields) == [*SHARED_KEYS, *own]
    defaults = FilterParams()
    for r in RULES:
        if r.param is not None:
            default = r.param.default
            assert getattr(defaults, r.param.name) == (list(default) if isinstance(default, tuple) else default)
            assert FilterParams.model_fields[r.param.name].description == r.param.help
    # a rule's own check stops the params in one line naming the key
    with pytest.raises(ValueError, match="max_tokens 5 needs count_tokens: true"):
        FilterParams(max_tokens=5, count_tokens=False)


def test_the_rules_a_recipe_runs_by_default_and_the_rl_exports_task_rules():
    on = [r.name for r in RULES if r.enabled(FilterParams())]
    assert "success_only_v1" not in on and "max_tokens_v1" in on
    assert TASK_RULES == ("contaminated_v1", "near_duplicate_v1")
    first_counting = next(i for i, r in enumerate(RULES) if r.needs_counts)
    screen = next(i for i, r in enumerate(RULES) if r.control_patterns)
    assert screen < first_counting  # a row the screen drops is never counted in vain


def test_the_docs_table_is_written_from_the_declarations():
    text = (ROOT / "docs" / "curation.md").read_text()
    assert filter_rules.DOCS.written_into(text) == text, (
        "docs/curation.md's rule table is not RULES': uv run python -m tracelake.curate.filter_rules "
        "--docs docs/curation.md"
    )
    for r in RULES:
        assert f"| `{r.name}` |" in text


def test_a_funnel_label_of_a_rule_no_longer_declared_is_its_name():
    assert filter_rules.label("max_tokens_v1") == "max_tokens"
    assert filter_rules.label("earlier_episode_v1") == "earlier_episode_v1"


NEW_RULE = """
    FilterRule(
        "max_turns_v1",
        label="max_turns",
        drops="`n_assistant_turns > filter.max_assistant_turns`",
        detail="41 assistant turns > 40",
        param=Param("max_assistant_turns", Annotated[int | None, Field(ge=1)], None, "drop longer rollouts; null: off"),
        enabled=lambda p: p.max_assistant_turns is not None,
        bind=lambda p: {"max_turns": p.max_assistant_turns},
    ),
)

# filter.<key>s no single rule owns"""

NEW_SQL = """-- max_turns_v1: more assistant turns than filter.max_assistant_turns.
SELECT trajectory_id, format('{} assistant turns > {}', n_assistant_turns, $max_turns) AS detail
FROM candidates
WHERE n_assistant_turns > $max_turns
"""


@pytest.mark.e2e
def test_a_new_rule_is_its_sql_and_one_declaration(sample_project, tmp_path):
    """The max_turns_v1 exercise: in a scratch copy of the built sample, a rule's SQL file and its
    FilterRule (its param with it) are the only edits; the filter runs it in order, and the funnel,
    `tracelake status`, the viewer, the report and the docs table show it."""
    repo = tmp_path / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    rules_py = repo / "src" / "tracelake" / "curate" / "filter_rules.py"
    code = rules_py.read_text()
    anchor = "\n)\n\n# filter.<key>s no single rule owns"
    assert code.count(anchor) == 1
    rules_py.write_text(code.replace(anchor, NEW_RULE))
    (repo / "sql" / "filter_rules" / "max_turns.sql").write_text(NEW_SQL)

    turns = sorted(r["n_assistant_turns"] for r in read_table(repo / "lake" / "pool", "pool").to_pylist())
    limit = turns[len(turns) * 3 // 4]  # drops the longest quarter or so of what the pool kept
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["filter"]["max_assistant_turns"] = limit
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {"PYTHONPATH": str(repo / "src")}  # the copy's tracelake, not this checkout's

    proc = run_stage(repo, "filter", env=env)
    assert proc.returncode == 0, proc.stderr
    expected = sum(t > limit for t in turns)
    assert f"max_turns_v1 {expected}" in proc.stdout
    funnel = yaml.safe_load((repo / "metrics" / "filter.json").read_text())
    assert funnel["rules"][-1] == "max_turns_v1" and funnel["total"]["dropped"]["max_turns_v1"] == expected > 0

    status = run_tracelake(repo, "status", env=env)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if line.startswith("filter funnel"))
    header = next(line for line in lines[title:] if line.startswith("┃"))
    assert header.split("┃")[-3].strip() == "max_turns", header  # the last rule's column, before kept

    report = run_stage(repo, "report", env=env)
    assert report.returncode == 0, report.stderr
    assert "max_turns_v1" in (repo / "reports" / "report.html").read_text()

    docs = written_doc_table("tracelake.curate.filter_rules", ROOT / "docs" / "curation.md", tmp_path, env)
    assert "| `max_turns_v1` | `n_assistant_turns > filter.max_assistant_turns` |" in docs

    page = view_page(repo, "/datasets", tmp_path / "view.log", env)
    assert f"max_assistant_turns={limit}" in page  # the pool's params: every rule's key
