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


# --------------------------------------------------------------------------
# Static deductions on input the grader cannot read: a deduction with a
# message, never "could not evaluate, no deduction" (no sandbox needed).

def _deduction(kind: str, source: str):
    from autograder.checks.values import Context
    from autograder.protocol import OK, ProbeResult
    from autograder.rubric import kind as kind_of
    task = load_rubric().tasks[0]
    check = next(d for d in task.deductions if d.kind == kind)
    impl = kind_of(check).impl
    ctx = Context({}, source=source)
    results = {p.id: ProbeResult(p.id, OK)
               for p in impl.plan(check, task, [], ctx)}
    return check, impl.evaluate(check, task, [], results, ctx)


def test_style_check_over_its_size_budget_is_a_deduction():
    source = REFERENCE + "# padding\n" * 12_000
    check, outcome = _deduction("pycodestyle", source)
    assert outcome.points == check.points and not outcome.passed
    assert "characters long" in outcome.lines[0]


@pytest.mark.parametrize("kind", ["pycodestyle", "shape_comments"])
def test_code_too_deep_to_read_is_a_deduction(kind):
    deep = "        y = self" + ".a" * 3000 + "\n"
    anchor = "        return probs @ v  # [bs, seq, hidden]\n"
    source = REFERENCE.replace(anchor, deep + anchor, 1)
    check, outcome = _deduction(kind, source)
    assert outcome.points == check.points and not outcome.passed
    assert "nested too deeply" in outcome.lines[0]
