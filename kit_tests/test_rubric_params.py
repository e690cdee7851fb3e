"""A kind's parameters (its frozen dataclass, ``checks.registry.register``)
are read from the rubric: typed, no unknown key, every required key, each
refusal naming the file and the item; and a tolerance changed there is the
one the judge applies."""
from __future__ import annotations

import re
import tomllib

import pytest
import torch

from autograder import homework
from autograder.checks.base import Context
from autograder.checks.kinds import register_homework_kinds
from autograder.rubric import (RubricError, load_rubric,
                               parse_rubric)
from autograder.sandbox.protocol import ERROR, OK, ProbeResult
from autograder.values import load_cases

# the attention homework's own kind (its profile's [data] kinds)
DropoutOnWeights = register_homework_kinds(
    homework.current())["dropout"].DropoutOnWeights


def _data_with(item: str, **keys) -> dict:
    """The live rubric's data with ``keys`` set on item ``item`` (a value
    None: the key removed)."""
    data = tomllib.loads(homework.current().rubric.read_text())
    entry = next(e for task in data["task"]
                 for section in ("item", "deduction", "bonus")
                 for e in task.get(section, []) if e["id"] == item)
    for key, value in keys.items():
        if value is None:
            del entry[key]
        else:
            entry[key] = value
    return data


def _refusal(item: str, **keys) -> str:
    with pytest.raises(RubricError) as raised:
        parse_rubric(_data_with(item, **keys), "other.toml")
    message = str(raised.value)
    assert message.startswith("other.toml: ")
    assert re.search(rf"(item|deduction|bonus) '{re.escape(item)}': ",
                     message), message
    return message


@pytest.mark.parametrize("item, key, value", [
    ("2.3b", "att_atol", "1e-5"),            # a string for a float
    ("3.1d", "relative_tolerance", True),   # a bool is no number
    ("3.4", "seed", 12.0),                   # a float for an int
    ("3.4", "attributes", 12),               # a number for a table
    ("1.1", "attributes", "q"),              # a string for a list
])
def test_a_parameter_of_the_wrong_type_is_refused(item, key, value):
    message = _refusal(item, **{key: value})
    assert f"{key} has the wrong type" in message


def test_an_unknown_parameter_is_refused():
    # att_atol is 2.3b's (dropout_train), not 3.1d's (dropout_on_weights).
    message = _refusal("3.1d", att_atol=1e-5)
    assert "unknown key 'att_atol' for kind 'dropout_on_weights'" in message
    assert "relative_tolerance" in message   # the allowed keys are listed


@pytest.mark.parametrize("item, key", [("3.4", "attributes"),
                                       ("1.bonus", "max_statements"),
                                       ("1.shapes", "init")])
def test_a_missing_required_parameter_is_refused(item, key):
    message = _refusal(item, **{key: None})
    assert f"needs key {key!r}" in message


def _first_of_kind(kind: str) -> str:
    """The id of the live rubric's first check of ``kind``."""
    return next(c.id for c in load_rubric().checks() if c.kind == kind)


@pytest.mark.parametrize("kind, key", [("concatenated_heads", "head_class"),
                                       ("concatenated_heads",
                                        "heads_attribute"),
                                       ("module_size", "own_class"),
                                       ("causal_property", "projections"),
                                       ("dropout_on_weights", "projections"),
                                       ("dropout_train", "value_layer"),
                                       ("dropout_train", "mix_layer")])
def test_a_class_a_check_needs_is_a_required_parameter(kind, key):
    message = _refusal(_first_of_kind(kind), **{key: None})
    assert f"needs key {key!r}" in message


@pytest.mark.parametrize("kind, key", [("dropout_train", "value_layer"),
                                       ("dropout_train", "mix_layer"),
                                       ("concatenated_heads",
                                        "heads_attribute")])
def test_a_layer_parameter_must_be_an_attribute_name(kind, key):
    message = _refusal(_first_of_kind(kind), **{key: "v.weight"})
    assert f"{key} must be" in message and "attribute name" in message


@pytest.mark.parametrize("kind", ["causal_property", "dropout_on_weights"])
@pytest.mark.parametrize("value", [[], ["W_query", "W key"]])
def test_projections_must_name_attributes(kind, value):
    message = _refusal(_first_of_kind(kind), projections=value)
    assert "projections must list the query and key projections'" \
        in message, message


@pytest.mark.parametrize("key, value, words", [
    ("ignore", ["E501", "501"], "ignore must list pycodestyle codes"),
    ("ignore", "E501", "ignore has the wrong type"),
    ("max_line_length", 0, "max_line_length must be from 1 to 1000"),
    ("max_line_length", 79.5, "max_line_length has the wrong type"),
])
def test_a_bad_style_option_is_refused(key, value, words):
    message = _refusal(_first_of_kind("pycodestyle"), **{key: value})
    assert words in message, message


def test_a_refusal_names_the_rubric_file(tmp_path):
    path = tmp_path / "rubric.toml"
    # whatever tolerance the rubric states (a TA may change it)
    text, count = re.subn(r"att_atol = [-+.\deE]+", 'att_atol = "x"',
                          homework.current().rubric.read_text(), count=1)
    assert count == 1
    path.write_text(text)
    with pytest.raises(RubricError, match=rf"^{path}: .*item '2\.3b'"):
        load_rubric(path)


def test_defaults_not_stated_are_the_kinds():
    check = next(c for c in parse_rubric(_data_with(
        "3.1d", relative_tolerance=None)).checks() if c.id == "3.1d")
    assert check.params.relative_tolerance == 1e-5
    assert check.params.zero_atol == 1e-7


def _probe_results(check, case, scale: float) -> list[ProbeResult]:
    """Results of DropoutOnWeights' probes on ``case`` for a module whose
    train-mode weights are dropped out (half of them) and the kept ones
    scaled by ``scale`` / (1 - p): [A | A] per head, as the probe makes."""
    attention = case.tensors["attention"].double()       # [b, n, n]
    p = float(case.init["dropout"])
    kept = torch.rand(attention.shape,
                      generator=torch.Generator().manual_seed(0)) < 0.5
    train = attention * kept * scale / (1 - p)

    def output(weights: torch.Tensor) -> torch.Tensor:
        return torch.cat([weights, weights], dim=-1)    # one head

    probes = DropoutOnWeights().case_probes(check, case)
    outputs = [output(train), output(attention)]
    return probes, [ProbeResult(probe.id, OK, outputs=[out],
                                output_kind="tensor")
                    for probe, out in zip(probes, outputs)] + [
        ProbeResult(probe.id, ERROR) for probe in probes[2:]]


def test_a_tolerance_changed_in_the_rubric_reaches_the_judge():
    case = next(c for c in load_cases() if c.task == "causal_attention"
                and c.mode == "train" and c.set == "public")
    verdicts = {}
    for tolerance in (1e-5, 1e-2):
        rubric = parse_rubric(_data_with("3.1d",
                                         relative_tolerance=tolerance))
        check = next(c for c in rubric.checks() if c.id == "3.1d")
        assert check.params.relative_tolerance == tolerance
        # Kept weights 0.1 % off eval / (1 - p): wrong within 1e-5 of
        # them, right within 1 %.
        probes, results = _probe_results(check, case, 1.001)
        verdicts[tolerance] = DropoutOnWeights().judge(
            check, case, results, probes, Context({}))
    assert not verdicts[1e-5].ok
    assert "neither 0 nor their eval value" in verdicts[1e-5].message
    assert verdicts[1e-2].ok
