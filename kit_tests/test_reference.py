"""The reference solution reproduces the 2022 course's frozen values and
rejects sizes it cannot split into heads."""
from __future__ import annotations

from autograder import homework
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

REFERENCE = homework.staff().reference


ROOT = Path(__file__).resolve().parents[1]
COURSE_VALUES = (ROOT.parent / "shared" / "reference-data"
                 / "umass-2022-attention-test-values.json")
ATOL = 1e-6


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_attention",
                                                  REFERENCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def course() -> dict[str, dict[str, torch.Tensor]]:
    """The course values: {"SelfAttentionTestValues": {"x": ...}, ...}."""
    if not COURSE_VALUES.exists():
        pytest.skip(f"no {COURSE_VALUES}: the 2022 course's frozen test "
                    "values (UMass NLP homework, Lialin and Shivagunde, "
                    "Apache-2.0) live beside the kit, in ../shared/ of the "
                    "team's machines and CI, not in the repository; see "
                    "docs/instructors.md, \"Reference data\"")
    raw = json.loads(COURSE_VALUES.read_text())
    return {group: {name: torch.tensor(t["data"], dtype=torch.float32)
                    .reshape(t["shape"]) for name, t in tensors.items()}
            for group, tensors in raw.items() if isinstance(tensors, dict)}


def load_course_weights(module: torch.nn.Module,
                        values: dict[str, torch.Tensor]) -> None:
    """Copy ``q_weight``-style values into ``q.weight``-style parameters."""
    loaded = set()
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            value = values[name.replace(".", "_")]
            # The course stored some multi-head biases as [1, hidden].
            parameter.copy_(value.reshape(parameter.shape))
            loaded.add(name)
    assert loaded, "no parameter loaded"


def assert_matches(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.shape == expected.shape
    worst = (got - expected).abs().max().item()
    assert worst <= ATOL, f"max abs difference {worst:.3g} > {ATOL}"


def test_self_attention_reproduces_the_course_values(reference, course):
    values = course["SelfAttentionTestValues"]
    module = reference.SelfAttention(input_size=7, hidden=9).eval()
    load_course_weights(module, values)
    with torch.no_grad():
        assert_matches(module(values["x"]), values["output"])


@pytest.mark.parametrize("causal, key", [(False, "output"),
                                         (True, "output_causal")])
def test_multi_head_reproduces_the_course_values(reference, course,
                                                 causal: bool, key: str):
    values = course["MultiHeadAttentionTestValues"]
    assert values["q_bias"].shape == (1, 9)  # the stored course layout
    module = reference.MultiHeadSelfAttention(
        input_size=7, hidden=9, num_heads=3, causal=causal).eval()
    load_course_weights(module, values)
    with torch.no_grad():
        assert_matches(module(values["x"]), values[key])


def test_causal_and_non_causal_course_outputs_differ(course):
    # Otherwise the two parametrized cases above would test one thing.
    values = course["MultiHeadAttentionTestValues"]
    assert (values["output"] - values["output_causal"]).abs().max() > 1e-3


@pytest.mark.parametrize("hidden, num_heads", [(10, 3), (9, 2), (4, 8)])
def test_indivisible_hidden_raises_a_clear_value_error(reference, hidden,
                                                       num_heads):
    with pytest.raises(ValueError) as error:
        reference.MultiHeadSelfAttention(7, hidden, num_heads)
    message = str(error.value)
    assert f"hidden ({hidden})" in message
    assert f"num_heads ({num_heads})" in message
    assert "divisible" in message


def test_divisible_hidden_is_accepted(reference):
    module = reference.MultiHeadSelfAttention(7, 12, 4)
    assert module.head_size == 3
