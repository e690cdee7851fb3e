"""What a probed call returned (autograder/checks/outputs.py): the
tensors when they have the form the item expects, else what the call
returned instead, in the student's words."""
from __future__ import annotations

import torch

from autograder.checks.outputs import returned_tensors
from autograder.sandbox.protocol import OK, Probe, ProbeResult

PROBE = Probe("c:eval:return_attention=True", "Attention", {},
              kwargs={"return_attention": True})


def _result(kind: str, count: int) -> ProbeResult:
    return ProbeResult(PROBE.id, OK, outputs=[torch.zeros(2)] * count,
                       output_kind=kind)


def test_a_single_tensor_where_one_is_expected():
    found, problem = returned_tensors(_result("tensor", 1), PROBE, None)
    assert found is not None and len(found) == 1 and problem == ""


def test_a_tuple_where_a_single_tensor_is_expected():
    found, problem = returned_tensors(_result("tuple", 2), PROBE, None)
    assert found is None
    assert problem == ("forward(x, return_attention=True) returned a tuple "
                       "of 2 tensors, expected a single tensor")


def test_a_tuple_of_the_expected_length():
    found, problem = returned_tensors(_result("tuple", 2), PROBE, 2)
    assert found is not None and len(found) == 2 and problem == ""


def test_a_single_tensor_where_a_tuple_is_expected():
    found, problem = returned_tensors(_result("tensor", 1), PROBE, 2)
    assert found is None
    assert "returned a single tensor, expected a tuple of 2" in problem
