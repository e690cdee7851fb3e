"""Deductions that student code cannot switch off and comments
where the notebook allows them: the shape trace's canary and
completeness, helpers graded by what ran, and regions that run on over
the comment lines after a function's last statement.

End to end, on the real grader: kit/variants/integrity.toml (graded by
kit_tests/test_grading_corpus.py -k integrity)."""
from __future__ import annotations

import torch

from autograder.submission import regions
from autograder.checks.trace_integrity import (CANARY_LINE, canary_shape,
                                               expected_lines, trace_problem)
from autograder.sandbox.protocol import Probe
from autograder.sandbox.worker import execute_probes

SOURCE = '''\
import torch
import torch.nn as nn


def _scores(q, k):
    """Helper reached through a dict."""
    s = q @ k.transpose(1, 2)
    return s


STEPS = {"scores": _scores}
SCALE = lambda s: s / 2


class Unit(nn.Module):
    def forward(self, x):
        # YOUR CODE STARTS HERE
        s = STEPS["scores"](x, x)  # [b, t, t]
        s = SCALE(s)  # [b, t, t]
        if s.shape[0] > 5:
            return s
        out = s @ x  # [b, t, d]
        return out  # [b, t, d]
        # YOUR CODE ENDS HERE
'''
METHODS = {"Unit": ("forward",)}


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1)
                if text in line)


def _trace(source: str = SOURCE, nonce: int = 1234):
    probe = Probe("t", "Unit", {}, args=[torch.ones(2, 3, 4)],
                  trace_shapes=True, methods=METHODS, canary=nonce)
    [result] = execute_probes(source, "unit.py", [probe])
    assert result.ok, result.message
    return result.shapes


def test_the_trace_records_the_canary_and_what_ran():
    shapes = _trace()
    assert shapes[CANARY_LINE] == [[canary_shape(1234)]]
    assert _line("def _scores") in shapes            # through a dict
    assert _line("SCALE = lambda") in shapes         # a lambda
    assert shapes[_line("s = q @ k")] == [[[2, 3, 3]]]
    assert trace_problem(SOURCE, "Unit", 1234, shapes) is None


def test_a_trace_without_the_canary_or_a_line_is_not_evidence():
    shapes = _trace()
    assert "missing or altered" in trace_problem(SOURCE, "Unit", 99, shapes)
    dropped = dict(shapes)
    del dropped[_line("s = SCALE(s)")]
    assert f"line {_line('s = SCALE(s)')} ran but was not recorded" in \
        trace_problem(SOURCE, "Unit", 1234, dropped)


def test_expected_lines_stop_where_forward_may_leave():
    expected = expected_lines(SOURCE, "Unit")
    assert expected == {_line("def forward"), _line('s = STEPS["scores"]'),
                        _line("s = SCALE(s)")}


def test_helpers_are_graded_by_what_ran():
    shapes = _trace()
    static = {r.function for r in regions.graded_regions(
        SOURCE, methods=METHODS) if r.helper}
    assert static == set()          # no call names them
    ran = {"Unit": frozenset(shapes)}
    found = {r.function: r for r in regions.graded_regions(
        SOURCE, methods=METHODS, ran=ran) if r.helper}
    assert set(found) == {"_scores", "SCALE"}
    assert found["_scores"].cls == "Unit"
    assert found["_scores"].first == _line("def _scores")


def test_a_region_runs_on_over_comments_after_the_final_return():
    source = SOURCE.replace("    return s\n\n\nSTEPS",
                            "    return s\n    # [b, t, t]\n\n\nSTEPS")
    shapes = _trace(source)
    [helper] = [r for r in regions.graded_regions(
        source, methods=METHODS, ran={"Unit": frozenset(shapes)})
        if r.function == "_scores"]
    assert helper.end == _line("    return s") + 1
    # a comment at the def's own indentation is the next section's
    source = SOURCE.replace("    return s\n\n\nSTEPS",
                            "    return s\n# Part 2\nSTEPS")
    [helper] = [r for r in regions.graded_regions(
        source, methods=METHODS, ran={"Unit": frozenset(shapes)})
        if r.function == "_scores"]
    assert helper.end == _line("    return s")


# --------------------------------------------------------------------------
# Content, not only presence: a trace filled ahead, or whose
# return records contradict what the call returned, is a forgery.

def test_a_true_trace_agrees_with_what_forward_returned():
    shapes = _trace()
    returned = [torch.ones(2, 3, 4)]
    assert trace_problem(SOURCE, "Unit", 1234, shapes, returned) is None


def test_return_records_that_contradict_the_output_are_a_forgery():
    shapes = _trace()
    for line in (_line("return out"), _line("return s")):
        shapes[line] = [[]]              # "bound no tensor"
    problem = trace_problem(SOURCE, "Unit", 1234, shapes,
                            [torch.ones(2, 3, 4)])
    assert problem and "not those of what it returned" in problem


def test_a_line_full_of_records_is_a_forgery():
    from autograder.sandbox.limits import LIMITS
    shapes = _trace()
    shapes[_line("out = s @ x")] = [[[k + 1]] for k in
                                    range(LIMITS.shapes_per_line)]
    problem = trace_problem(SOURCE, "Unit", 1234, shapes)
    assert problem and "more records than the grader keeps" in problem


def test_the_parent_refuses_a_trace_past_its_cap():
    from autograder.sandbox.limits import LIMITS
    from autograder.sandbox.shape_table import FULL, ShapeTable
    table = ShapeTable()
    table.start()
    for k in range(LIMITS.shapes_per_line):     # the control: at the cap
        table.record(7, [[k + 1]])
    shapes, problem = table.take()
    assert len(shapes[7]) == LIMITS.shapes_per_line and problem == ""
    table.start()
    for k in range(LIMITS.shapes_per_line + 1):  # one more: a forgery
        table.record(7, [[k + 1]])
    assert table.take()[1] == FULL
