"""The grader on the submissions an unseen test would try (issue 10).

Each entry of kit_tests/corpus/fidelity.toml is the live reference with a
few edits and the score it must get task by task: one mistake costs its
own item (no cascade), no points without work, deductions that cannot be
dodged, and names and advice that fit. Correct styles stay at full marks
in test_grading_corpus.py and test_grading_part3.py.
"""
from __future__ import annotations

import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograder import report
from autograder.grade import GradeResult, grade_source, sandbox_runner
from autograder.rubric import load_rubric
from autograder.values import load_cases
from kit.examples import apply_edits

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "solutions" / "transformer_lm" /
             "modeling_attention.py").read_text()
SPEC = Path(__file__).resolve().parent / "corpus" / "fidelity.toml"
ENTRIES = tomllib.loads(SPEC.read_text())
EXPAND = {"DEEP": "[" * 1500 + "]" * 1500}


def source_of(name: str) -> str:
    """The reference with the entry's edits applied."""
    edits = []
    for old, new in ENTRIES[name]["edits"]:
        for word, text in EXPAND.items():
            new = new.replace(word, text)
        edits.append((old, new))
    return apply_edits(REFERENCE, edits, f"{SPEC.name} [{name}]")


@pytest.fixture(scope="module")
def graded() -> dict[str, GradeResult]:
    """Every entry graded once, with one shared warm sandbox."""
    from autograder.sandbox import Sandbox
    rubric, cases = load_rubric(), load_cases()
    with Sandbox() as sandbox:
        runner = sandbox_runner(sandbox)

        def one(name: str) -> tuple[str, GradeResult]:
            return name, grade_source(source_of(name), f"{name}.py", rubric,
                                      cases, runner, name=name)

        with ThreadPoolExecutor(2) as pool:
            return dict(pool.map(one, ENTRIES))


@pytest.mark.parametrize("name", list(ENTRIES))
def test_scores_by_task(graded, name):
    grade = graded[name]
    assert not grade.internal_error, grade.internal_error
    scores = {t.task.id: t.score for t in grade.tasks}
    assert scores == ENTRIES[name]["scores"], report.feedback_markdown(grade)


@pytest.mark.parametrize("name", [n for n in ENTRIES
                                  if ENTRIES[n].get("says")
                                  or ENTRIES[n].get("never")])
def test_feedback_words(graded, name):
    text = report.feedback_markdown(graded[name])
    for words in ENTRIES[name].get("says", []):
        assert words in text, (words, text)
    for words in ENTRIES[name].get("never", []):
        assert words not in text, (words, text)


def test_no_work_earns_no_value_or_property_item(graded):
    # Zeros everywhere and a stand-in module with GPT-2's attributes and
    # parameter count: only 1.1 (three nn.Linear attributes, built in
    # __init__) may be earned.
    grade = graded["no_work"]
    earned = [c.check.id for t in grade.tasks for c in (*t.items, *t.bonuses)
              if c.outcome.points]
    assert earned == ["1.1"], report.feedback_markdown(grade)


def test_an_item_names_a_mistake_only_if_it_explains_every_failure(graded):
    for grade in graded.values():
        for task in grade.tasks:
            for item in task.items:
                assert len(item.outcome.mistakes) <= 1, item.outcome.lines
