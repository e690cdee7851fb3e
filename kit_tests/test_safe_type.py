"""Type tests on the submission's values run none of its code
(autograder/sandbox/safe_type.py): ``isinstance`` reads a ``__class__``
property when the type is not the class asked (a property made of
``functools.partial(exec, source)`` ran it inside the grader's frame),
and a metaclass can make ``type(value).__name__`` a property."""
from __future__ import annotations

import torch

from autograder.sandbox.safe_type import is_a, type_name


def _loud(calls: list) -> object:
    class Loud(dict):
        __class__ = property(calls.append)   # a C callable: no frame
    return Loud()


def test_a_class_property_runs_under_isinstance_but_not_is_a():
    calls: list = []
    value = _loud(calls)
    isinstance(value, (tuple, list))
    assert calls, "the premise: isinstance reads __class__"
    calls.clear()
    assert not is_a(value, (tuple, list)) and is_a(value, dict)
    assert calls == []


def test_is_a_knows_subclasses_of_tensors_and_modules():
    assert is_a(torch.nn.Parameter(torch.ones(1)), torch.Tensor)
    assert is_a(torch.nn.Linear(1, 1), torch.nn.Module)
    assert not is_a(torch.ones(1), torch.nn.Module)


def test_type_name_reads_past_a_metaclass_property():
    calls: list = []

    class Meta(type):
        __name__ = property(lambda cls: calls.append("ran") or "Fake")

    value = Meta("Real", (), {})()
    assert type(value).__name__ == "Fake" and calls   # the premise
    calls.clear()
    assert type_name(value) == "Real" and calls == []
