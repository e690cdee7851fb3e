"""A point is one edit: the rubric's facts reach every document that states
them (kit/generate/facts.py), and nothing built from a changed rubric still
states the old number."""
from __future__ import annotations

import pytest

from autograder import homework
from autograder.rubric import load_rubric
from kit.generate import facts
from kit.generate.facts import FactsError
from kit_tests.rubrics import (item_points, other_points, points_words,
                               rubric_text_with, rubric_with)


def test_documents_state_the_rubric():
    assert facts.stale(load_rubric()) == [], "run `make facts`"


@pytest.fixture
def unscored(tmp_path, monkeypatch):
    """The homework with its questions and none of their points: the
    rubric's own points are under test, whatever points a course gives
    the questions (a term's first step)."""
    from dataclasses import replace
    import tomllib
    asked = tomllib.loads(homework.staff().questions.read_text())
    path = tmp_path / "questions.toml"
    path.write_text("questions = [" + ", ".join(
        f'"{q}"' for q in asked["questions"]) + "]\n")
    staff = replace(homework.staff(), questions=path)
    monkeypatch.setattr(facts.homework, "staff", lambda: staff)
    return replace(homework.current(), questions=path)


def test_a_changed_point_reaches_every_block(unscored):
    before = load_rubric()
    points = other_points("2.2")        # 2.2: one more point
    old = before.max_score
    new = old + points - item_points("2.2")
    rubric = rubric_with("2.2", points)
    task2 = sum(i.points for i in rubric.tasks[1].items)
    title = next(i.title for i in rubric.tasks[1].items if i.id == "2.2")
    table = facts.points_table(rubric)
    assert f"| 2.2 | {title} | {points:g} |" in table
    assert f"| **Task 2: MultiHeadSelfAttention** | | **{task2:g}** |" \
        in table
    assert f"**{new:g}** (+{before.max_bonus:g} bonus)" in table
    assert f"**{old:g}**" not in table
    summary = facts.score_summary(rubric)
    assert f"Scores are out of {new:g} (" in summary
    assert f"Part 2: {task2:g}" in summary and f" {old:g} " not in summary
    assert f"- 2.2 ({points_words(points)}): MultiHeadSelfAttention" in \
        facts.task_list(rubric)
    assert facts.point_documents()
    for doc in facts.point_documents():
        text = (facts.home() / doc).read_text()
        assert facts.fill(text, rubric, doc) != text, doc


def test_stale_documents_are_named(tmp_path):
    for doc in facts.documents():
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / doc).write_text((facts.home() / doc).read_text())
    changed = rubric_with("2.2", other_points("2.2"))
    assert facts.stale(changed, tmp_path) == facts.point_documents()
    assert facts.stale(load_rubric(), tmp_path) == []


def test_an_unknown_block_is_an_error():
    with pytest.raises(FactsError, match="README.md: unknown facts block"):
        facts.fill("<!-- facts:totals -->\nx\n<!-- /facts -->", load_rubric(),
                   "README.md")


def test_cli_help_states_the_rubric(unscored, tmp_path):
    from autograder import cli
    total, bonus = load_rubric().max_score, load_rubric().max_bonus
    changed = tmp_path / "rubric.toml"
    changed.write_text(rubric_text_with("2.2", item_points("2.2") + 1))
    assert f"{total:g} points (+{bonus:g} bonus)" in \
        cli.build_parser(unscored).format_help()
    from dataclasses import replace
    text = cli.build_parser(replace(unscored, rubric=changed)
                            ).format_help()
    assert f"{total + 1:g} points (+{bonus:g} bonus)" in text
    assert f"{total:g} points" not in text
    assert "CausalAttention" in text       # every task, not two classes


def test_scored_questions_count_in_every_stated_total(monkeypatch,
                                                      tmp_path):
    from dataclasses import replace

    from autograder import cli
    rubric = load_rubric()
    total = rubric.max_score
    questions = tmp_path / "questions.toml"
    questions.write_text('questions = ["Q1", "Q2", "Q3"]\n'
                         '[points]\nQ1 = 2\nQ3 = 3.5\n')
    staff = replace(homework.staff(), questions=questions)
    monkeypatch.setattr(facts.homework, "staff", lambda: staff)
    summary = facts.score_summary(rubric)
    assert summary.startswith(
        f"Scores are out of {total + 5.5:g}: {total:g} autograded (Part 1:")
    assert "and 5.5 for the notebook's questions (Q1: 2, Q3: 3.5)" in summary
    table = facts.points_table(rubric)
    assert "| Q3 | the notebook's question Q3 (scored by the staff) | 3.5 |" \
        in table and "| Q2 |" not in table
    assert f"| | **total** | **{total + 5.5:g}** (+" in table
    text = cli.build_parser(replace(homework.current(), questions=questions)
                            ).format_help()
    assert f"{total + 5.5:g} points (+{rubric.max_bonus:g} bonus): " \
        f"{total:g} autograded and 5.5 for the notebook's" \
        in " ".join(text.split())
    assert summary.endswith("; the points live in `autograder/rubric.toml`"
                            " (the questions' in `assignment/attention.md`)"
                            ".\n")
    questions.write_text('questions = ["Q1"]\n')   # feedback only: as before
    assert facts.score_summary(rubric).startswith(
        f"Scores are out of {total:g} (Part 1:")


def test_a_renamed_variable_names_what_to_run(tmp_path):
    # The instructor renames `bs` in the reference: the first thing that
    # fails (kit_tests/conftest.py) names `make skeleton` and
    # `make test-values`, not a bare ValueError in some test.
    from kit.generate import stale
    REFERENCE = homework.staff().reference
    assert stale() == []
    renamed = tmp_path / "modeling_attention.py"
    text = REFERENCE.read_text()
    assert "bs, seq, _ = x.shape" in text
    renamed.write_text(text.replace("bs, seq, _ = x.shape",
                                    "batch, seq, _ = x.shape").replace(
                                        "(bs,", "(batch,"))
    lines = stale(reference_path=renamed)
    assert any("`make test-values`" in line for line in lines), lines
    # A header's points edited by hand in the reference: `make skeleton`
    # (it rewrites them from the rubric).
    header = f"# Task 2.2 ({points_words(item_points('2.2'))})"
    assert header in text
    renamed.write_text(text.replace(header, "# Task 2.2 "
                                    f"({points_words(other_points('2.2'))})"))
    assert any("`make skeleton`" in line
               for line in stale(reference_path=renamed))
