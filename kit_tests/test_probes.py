"""Probes (autograder/probes.py) are built once, whole: a variant of a
case's call (its id's suffix, another input, other weights, a stand-in)
is given to the builder, a built probe cannot be edited, a stand-in is a
typed record, and a hidden case's probe is marked hidden by its builder
(data), not recognised by its id."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from autograder import probes as P
from autograder.config import load_config
from autograder.grade import hidden_probe_ids
from autograder.sandbox.protocol import Probe, StandIn


@pytest.fixture(scope="module")
def cases():
    return load_config().cases


def _one(cases, wanted: str):
    return next(c for c in cases if c.set == wanted and "x" in c.tensors)


def test_a_built_probe_cannot_be_edited(cases):
    probe = P.case_probe(_one(cases, "public"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        probe.id += ":edited"   # type: ignore[misc]


def test_a_variant_is_given_to_the_builder(cases):
    case = _one(cases, "public")
    plain = P.case_probe(case)
    x = 2 * case.tensors["x"]
    stand_in = StandIn("Head", {"size": 3}, (1, 2, 3))
    variant = P.case_probe(case, suffix="*2", x=x, state={}, drawn_seed=5,
                           stand_in=stand_in)
    assert variant.id == plain.id + "*2"
    assert torch.equal(variant.args[0], x) and variant.state == {}
    assert set(plain.state) == set(case.weights) != set()
    assert (variant.drawn_seed, variant.stand_in) == (5, stand_in)


def test_hidden_is_marked_by_the_builder_from_the_case(cases):
    assert P.case_probe(_one(cases, "hidden")).hidden
    assert not P.case_probe(_one(cases, "public")).hidden


def test_hidden_probes_are_read_from_the_mark_not_the_id(cases):
    hidden_case = _one(cases, "hidden")
    marked = Probe("opaque-name", "Any", {}, hidden=True)
    # named like the hidden case, but not built from it: not hidden
    unmarked = Probe(f"{hidden_case.name}:eval:x", "Any", {})
    assert hidden_probe_ids([marked, unmarked], cases) == {"opaque-name"}


def test_an_inspection_of_sizes_only_a_hidden_case_has_is_hidden(cases):
    hidden_case = _one(cases, "hidden")
    public = {(c.cls, str(c.init)) for c in cases if c.set == "public"}
    if (hidden_case.cls, str(hidden_case.init)) in public:
        pytest.skip("this homework's hidden case shares a public size")
    probe = P.inspect_probe(hidden_case.cls, hidden_case.init)
    assert hidden_probe_ids([probe], cases) == {probe.id}


def test_a_stand_in_from_the_rubric_is_typed():
    assert StandIn.of({}) is None
    spec = StandIn.of({"cls": "Head", "init": {"d": 4}, "shape": [2, 5, 4]})
    assert spec == StandIn("Head", {"d": 4}, (2, 5, 4))
