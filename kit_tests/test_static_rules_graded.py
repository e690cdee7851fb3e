"""The rules read from the code itself, through the real grader (one warm
sandbox): a class indented under ``if True:`` and code written above the
START marker keep their shape-comment deduction (the control: the same
code uncommented between the markers), a one-statement forward calling a
six-statement helper earns no bonus, code run from a string at import
takes the grader-access deduction of every task and counts as failing its
other static rules. Each attack beside its control (the same code without
the trick); the unit tests are kit_tests/test_static_rules.py."""
from __future__ import annotations

import re

import pytest

from kit.corpus.grading_batch import grade_batch
from kit_tests.reference_source import FULL_REFERENCE

pytestmark = pytest.mark.e2e

ACCESS = {"1.access", "2.access", "3.1.access", "3.2.access", "3.3.access",
          "3.4.access"}
OWN = '''        q, k, v = self.q(x), self.k(x), self.v(x)  # [bs, seq, hidden]
        probs = torch.softmax(
            q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1
        )  # [bs, seq, seq]
        return probs @ v  # [bs, seq, hidden]
'''
HELPER = '''

def _attend(module, x):
    """The attention of x."""
    q = module.q(x)  # [bs, seq, hidden]
    k = module.k(x)  # [bs, seq, hidden]
    v = module.v(x)  # [bs, seq, hidden]
    scores = q @ k.transpose(1, 2)  # [bs, seq, seq]
    probs = torch.softmax(scores / q.shape[-1] ** 0.5, -1)  # [bs, seq, seq]
    return probs @ v  # [bs, seq, hidden]
'''


def _uncommented(source: str) -> str:
    """SelfAttention.forward without its shape comments."""
    return source.replace(OWN, re.sub(r"  # \[[^\n]*", "", OWN))


def _under_if_true(source: str) -> str:
    """SelfAttention indented under ``if True:``."""
    start = source.index("class SelfAttention(nn.Module):")
    end = source.index("class MultiHeadSelfAttention(nn.Module):")
    body = "".join(f"    {line}" if line.strip() else line
                   for line in source[start:end].rstrip().splitlines(True))
    return source[:start] + "if True:\n" + body + "\n\n\n" + source[end:]


def _above_the_markers(source: str) -> str:
    """SelfAttention.forward's code above its START marker, uncommented,
    with only the return between the markers."""
    above = re.sub(r"  # \[[^\n]*", "", OWN).replace(
        "        return probs @ v\n", "")
    return source.replace("        # YOUR CODE STARTS HERE\n" + OWN,
                          above + "        # YOUR CODE STARTS HERE\n"
                          "        return probs @ v  # [bs, seq, hidden]\n")


def _helper_forward(source: str) -> str:
    return source.replace(OWN, "        return _attend(self, x)  # [bs, seq, "
                          "hidden]\n") + HELPER


SOURCES = {
    "reference": FULL_REFERENCE,
    "under_if_true": _under_if_true(FULL_REFERENCE),
    "uncommented": _uncommented(FULL_REFERENCE),
    "uncommented_under_if_true": _under_if_true(
        _uncommented(FULL_REFERENCE)),
    "code_above_the_markers": _above_the_markers(FULL_REFERENCE),
    "forward_calls_a_helper": _helper_forward(FULL_REFERENCE),
    "exec_at_import": FULL_REFERENCE.replace(
        "import torch.nn as nn\n",
        'import torch.nn as nn\n\nexec("_unused = 1")\n', 1),
}
# What each loses, beside its control's.
LOSES = {
    "reference": set(),
    "under_if_true": set(),
    "uncommented": {"1.shapes", "1.bonus"},
    "uncommented_under_if_true": {"1.shapes", "1.bonus"},
    "code_above_the_markers": {"1.shapes", "1.bonus"},
    "forward_calls_a_helper": {"1.bonus"},
    # Code run from a string counts as failing every static rule of every
    # task it is charged to: the grader cannot read it.
    "exec_at_import": ACCESS | {"1.pep8", "2.pep8", "3.1.pep8", "3.2.pep8",
                                "3.3.pep8", "3.4.pep8", "1.shapes",
                                "2.shapes", "3.1.shapes", "3.2.shapes",
                                "3.3.shapes", "1.bonus"},
}


@pytest.fixture(scope="module")
def graded():
    for name, source in SOURCES.items():
        compile(source, name, "exec")
    return grade_batch(SOURCES)


@pytest.mark.parametrize("name", SOURCES)
def test_what_each_loses(graded, name):
    grade = graded[name]
    assert not grade.internal_error, grade.internal_error
    lost = {c.check.id for t in grade.tasks
            for c in (*t.items, *t.deductions, *t.bonuses)
            if not c.outcome.passed}
    assert lost == LOSES[name], "\n".join(
        line for t in grade.tasks
        for c in (*t.items, *t.deductions, *t.bonuses)
        if not c.outcome.passed for line in c.outcome.lines)


def test_the_bonus_says_it_counted_the_helper(graded):
    (bonus,) = [c for t in graded["forward_calls_a_helper"].tasks
                for c in t.bonuses]
    assert "7 statements (with the functions of yours it runs)" in \
        "\n".join(bonus.outcome.lines)
