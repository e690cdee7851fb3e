"""Which catalogue mistake an item's feedback names: the one that explains
every failing case, where a case may be explained by several (two mistakes
coincide on it) or by the error a mistake's code raises."""
from __future__ import annotations

from types import SimpleNamespace

from autograder.checks.base import Verdict, _name_error, named_mistake


def failing(*candidates: str) -> Verdict:
    return Verdict(False, "wrong", "wrong values",
                   candidates[0] if candidates else None, candidates)


def test_the_mistake_common_to_every_failing_case_is_named():
    # One head: scaling by sqrt(hidden) is scaling by sqrt(head_size), so
    # that case matches both; the other case tells them apart.
    verdicts = [failing("scale_hidden", "scale_num_heads"),
                failing("scale_num_heads"), Verdict(True)]
    assert named_mistake(verdicts) == "scale_num_heads"


def test_catalogue_order_breaks_a_tie():
    assert named_mistake([failing("no_scale", "scale_values")] * 2) == \
        "no_scale"


def test_no_common_mistake_or_an_unexplained_case_names_none():
    assert named_mistake([failing("a"), failing("b")]) is None
    assert named_mistake([failing("a"), failing()]) is None
    assert named_mistake([Verdict(True)]) is None


def test_a_frozen_error_names_the_mistake_that_raises_it():
    case = SimpleNamespace(mistake_errors={
        "causal_mask_uncut": "The size of tensor a (7) must match the size "
                             "of tensor b (5) at non-singleton dimension 2"})
    raised = Verdict(False, "forward(x) failed: RuntimeError: The size of "
                     "tensor a (7) must match the size of tensor b (5) at "
                     "non-singleton dimension 2", "error")
    assert _name_error(raised, case).candidates == ("causal_mask_uncut",)
    other = Verdict(False, "forward(x) failed: KeyError: 'q'", "error")
    assert _name_error(other, case).candidates == ()
    assert _name_error(None, case) is None
