"""Static deductions on input the grader cannot read: a
deduction with a message, never "could not evaluate, no deduction" (no
sandbox needed). The submissions an unseen test would try are the group
``fidelity`` of the variant catalogue, graded in test_grading_corpus.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from kit_tests.rubrics import live_task_methods

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "solutions" / "transformer_lm" /
             "modeling_attention.py").read_text()


def _deduction(kind: str, source: str):
    from autograder import homework
    from autograder.checks.base import Context
    from autograder.checks.shape_notation import notation_of
    from autograder.sandbox.protocol import OK, ProbeResult
    from autograder.rubric import kind as kind_of
    task = load_rubric().tasks[0]
    check = next(d for d in task.deductions if d.kind == kind)
    impl = kind_of(check).impl
    ctx = Context({}, source=source, task_methods=live_task_methods(),
                  notation=notation_of(homework.current()))
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
    assert REFERENCE.count(anchor) == 1
    source = REFERENCE.replace(anchor, deep + anchor, 1)
    check, outcome = _deduction(kind, source)
    assert outcome.points == check.points and not outcome.passed
    assert "nested too deeply" in outcome.lines[0]
