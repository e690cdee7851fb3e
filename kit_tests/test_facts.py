"""A point is one edit: the rubric's facts reach every document that states
them (kit/facts.py), and nothing built from a changed rubric still states
the old number."""
from __future__ import annotations

import pytest

from autograder.rubric import DEFAULT_RUBRIC, load_rubric
from kit import facts
from kit.facts import ROOT, FactsError
from kit_tests.rubrics import rubric_with


def test_documents_state_the_rubric():
    assert facts.stale() == [], "run `make facts`"


def test_a_changed_point_reaches_every_block():
    before = load_rubric()
    old, new = before.max_score, before.max_score + 1
    rubric = rubric_with("2.2", 2)      # 2.2: 1 -> 2 points
    task2 = sum(i.points for i in rubric.tasks[1].items)
    table = facts.points_table(rubric)
    assert "| 2.2 | attention probabilities match (causal) | 2 |" in table
    assert f"| **Task 2: MultiHeadSelfAttention** | | **{task2:g}** |" \
        in table
    assert f"**{new:g}** (+1 bonus)" in table
    assert f"**{old:g}**" not in table
    summary = facts.score_summary(rubric)
    assert f"Scores are out of {new:g} (" in summary
    assert f"Part 2: {task2:g}" in summary and f" {old:g} " not in summary
    assert "- 2.2 (2 points): MultiHeadSelfAttention" in \
        facts.task_list(rubric)
    for doc in facts.DOCUMENTS:
        text = (ROOT / doc).read_text()
        assert facts.fill(text, rubric, doc) != text, doc


def test_stale_documents_are_named(tmp_path):
    for doc in facts.DOCUMENTS:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / doc).write_text((ROOT / doc).read_text())
    changed = rubric_with("2.2", 2)
    assert facts.stale(tmp_path, changed) == list(facts.DOCUMENTS)
    assert facts.stale(tmp_path, load_rubric()) == []


def test_an_unknown_block_is_an_error():
    with pytest.raises(FactsError, match="README.md: unknown facts block"):
        facts.fill("<!-- facts:totals -->\nx\n<!-- /facts -->", load_rubric(),
                   "README.md")


def test_cli_help_states_the_rubric(monkeypatch, tmp_path):
    import autograder.rubric
    from autograder import cli
    total = load_rubric().max_score
    changed = tmp_path / "rubric.toml"
    changed.write_text(DEFAULT_RUBRIC.read_text().replace(
        'id = "2.2"\ntitle = "attention probabilities match (causal)"\n'
        'points = 1\n', 'id = "2.2"\ntitle = "attention probabilities '
        'match (causal)"\npoints = 2\n'))
    assert f"{total:g} points (+1 bonus)" in cli.build_parser().format_help()
    monkeypatch.setattr(autograder.rubric, "DEFAULT_RUBRIC", changed)
    text = cli.build_parser().format_help()
    assert f"{total + 1:g} points (+1 bonus)" in text
    assert f"{total:g} points" not in text
    assert "CausalAttention" in text       # every task, not two classes


def test_a_renamed_variable_names_what_to_run(tmp_path):
    # The instructor renames `bs` in the reference: the first thing that
    # fails (kit_tests/conftest.py) names `make skeleton` and
    # `make test-values`, not a bare ValueError in some test.
    from kit.generated import stale
    from kit.skeleton import REFERENCE
    assert stale() == []
    renamed = tmp_path / "modeling_attention.py"
    text = REFERENCE.read_text()
    assert "bs, seq, _ = x.shape" in text
    renamed.write_text(text.replace("bs, seq, _ = x.shape",
                                    "batch, seq, _ = x.shape").replace(
                                        "(bs,", "(batch,"))
    lines = stale(renamed)
    assert any("`make test-values`" in line for line in lines), lines
    # A header's points edited by hand in the reference: `make skeleton`
    # (it rewrites them from the rubric).
    renamed.write_text(text.replace("# Task 2.2 (1 point)",
                                    "# Task 2.2 (5 points)"))
    assert any("`make skeleton`" in line for line in stale(renamed))
