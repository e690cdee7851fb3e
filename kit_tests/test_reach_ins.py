"""Reach-ins into the grader caught at run time, whatever their
spelling: names built from strings (``"__co" + "de__"``,
``operator.attrgetter``, ``getattr(sys, "mod" + "ules")``) pass a rule
that reads names, but not the worker's audit hook and its watch on the
grader's state (``autograder/sandbox/audit.py``). Each attack beside its
control, the same code without the trick: the attack is reported to the
parent, costs every task's access deduction and its shape trace, and
never scores above its control. Run in the jail modes the machine has."""
from __future__ import annotations

import re

import pytest

from autograder.config import load_config
from autograder.grade import grade_source
from autograder.sandbox.pool import Sandbox
from kit import variants
from kit_tests.jail_modes import refusal

REFERENCE = variants.find("styles/reference").source()
# The same code with no shape comment at all (its control loses every
# shape deduction, and nothing else).
UNCOMMENTED = re.sub(r"(?<=\S)  # \[[^\]\n]*\]$", "", REFERENCE,
                     flags=re.M)

# The attack: the shape recorder reached through the constants of
# forward's code (names built at run time) and its table filled ahead
# with records for every line, so that no real shape gets in.
FILL = '''

import operator as _op


def _recorder_of(function):
    code = _op.attrgetter("__co" + "de__")(function)
    for const in _op.attrgetter("co_" + "consts")(code):
        for cell in getattr(const, "__clo" + "sure__", None) or ():
            found = getattr(cell.cell_contents, "__se" + "lf__", None)
            if hasattr(found, "shapes"):
                return found
    return None


def _filling(forward):
    def filled(self, *args, **kwargs):
        recorder = _recorder_of(forward)
        if recorder is not None:
            for line in range(1, 400):
                recorder.shapes[line] = [[[k + 1]] for k in range(20)]
        return forward(self, *args, **kwargs)
    return filled


for _value in list(locals().values()):
    if isinstance(_value, type) and issubclass(_value, nn.Module) and \\
            "forward" in vars(_value):
        _value.forward = _filling(vars(_value)["forward"])
'''
# The grader's own class patched through sys.modules (no audit event
# for that): its recorder's take made to return nothing forged-looking.
PATCH = '''

import sys as _sys

for _name, _module in list(getattr(_sys, "mod" + "ules").items()):
    if _name.startswith("auto" + "grader.sandbox.shape"):
        _module.ShapeRecorder._add = lambda self, line, shapes: None
'''
# exec reached through print's module, the name built from strings.
EXEC = '''

_run = getattr(getattr(print, "__se" + "lf__"), "ex" + "ec")
_run("_HELPER = 1")
'''


def _modes() -> list:
    return [pytest.param(True, id="namespaces"),
            pytest.param(False, id="no-namespaces")]


@pytest.fixture(scope="module", params=_modes())
def graded(request):
    """grade(source) -> (score, lost item ids, reach-ins) in one mode."""
    config = load_config()
    with Sandbox(namespaces=request.param) as box:
        refused = None if request.param else refusal(box)
        if refused is not None:
            pytest.skip(f"the grader refuses ({refused})")

        done: dict[str, tuple] = {}

        def grade(source: str):
            if source not in done:
                done[source] = _grade(source)
            return done[source]

        def _grade(source: str):
            caught: set[str] = set()

            def runner(source, filename, probes):
                results = box.run(source, filename, probes)
                # Placed by probe where the parent can tell, else on all.
                caught.update(r for res in results
                              for r in (*res.reach_ins, *res.reach_here))
                return results

            result = grade_source(source, "attack.py", config, runner)
            assert not result.internal_error, result.internal_error
            lost = {c.check.id for t in result.tasks
                    for c in (*t.items, *t.deductions, *t.bonuses)
                    if not c.outcome.passed}
            return result.score, lost, caught
        yield grade


ACCESS = {"1.access", "2.access", "3.1.access", "3.2.access", "3.3.access",
          "3.4.access"}


@pytest.mark.e2e   # whole submissions graded in each mode
def test_the_controls_are_caught_by_nothing(graded):
    score, lost, caught = graded(REFERENCE)
    assert not caught and not lost, (lost, caught)
    _, lost, caught = graded(UNCOMMENTED)
    assert not caught and lost and all(
        i.endswith((".shapes", ".bonus")) for i in lost), lost


@pytest.mark.e2e   # whole submissions graded in each mode
@pytest.mark.parametrize("trick", [FILL, PATCH, EXEC],
                         ids=["fill-recorder", "patch-class", "exec"])
def test_a_reach_in_spelled_at_run_time_costs_at_least_its_control(
        graded, trick):
    control_score, control_lost, _ = graded(UNCOMMENTED)
    score, lost, caught = graded(UNCOMMENTED + trick)
    assert caught, "the worker's audit caught nothing"
    assert ACCESS <= lost, lost
    assert control_lost <= lost, (control_lost - lost)
    assert score < control_score, (score, control_score)


# Code the grader's own frame runs: an exception whose message is a
# property made of C callables, read by the grader's describe_exception:
# exec of a string with no frame of the submission's file on the stack,
# the grader's innermost. Its control
# raises the same exception with a plain message.
LOUD = '''

import functools as _ft
import operator as _op


class _Loud(Exception):
    go = _ft.partial(exec, "_HELPER = 1", {})
    __str__ = property(_op.methodcaller("go"))
'''
QUIET = '''

class _Loud(Exception):
    def __str__(self):
        return "loud"
'''
RAISE = ("    return MultiHeadAttention(768, 768, 1024, 0.1, 12, "
         "qkv_bias=True)\n", "    raise _Loud()\n")


@pytest.mark.e2e   # whole submissions graded in each mode
def test_code_the_grader_runs_from_a_string_is_charged(graded):
    raising = UNCOMMENTED.replace(*RAISE)
    assert raising != UNCOMMENTED
    control_score, control_lost, caught = graded(raising + QUIET)
    assert not caught and "3.4" in control_lost
    score, lost, caught = graded(raising + LOUD)
    assert caught and ACCESS <= lost, (caught, lost)
    assert score < control_score, (score, control_score)
