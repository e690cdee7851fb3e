"""Part 1: single-head self-attention (Tasks 1.1 and 1.2)."""
from __future__ import annotations

import pytest
import torch.nn as nn

from .adapters import make_self_attention, new_self_attention, \
    run_self_attention
from .cases import cases
from .comparison import assert_close
from transformer_lm.test_values import PublicCase


@pytest.mark.parametrize("case", cases("SelfAttention"))
def test_projections_are_linear_layers_with_bias(case: PublicCase):
    """Task 1.1: q, k and v are three nn.Linear(input_size, hidden)."""
    init = case.record["init"]
    module = new_self_attention(init["input_size"], init["hidden"])
    projections = {}
    for name in ("q", "k", "v"):
        layer = getattr(module, name, None)
        if not isinstance(layer, nn.Linear):
            pytest.fail(f"Task 1.1: self.{name} must be an nn.Linear, got "
                        f"{type(layer).__name__}", pytrace=False)
        sizes = (layer.in_features, layer.out_features)
        assert sizes == (init["input_size"], init["hidden"]), (
            f"Task 1.1: self.{name} maps {sizes[0]} to {sizes[1]} features;"
            f" expected input_size={init['input_size']} to "
            f"hidden={init['hidden']}")
        assert layer.bias is not None, f"Task 1.1: self.{name} needs a bias"
        projections[id(layer)] = name
    assert len(projections) == 3, (
        "Task 1.1: q, k and v must be three separate layers")


@pytest.mark.parametrize("case", cases("SelfAttention"))
def test_forward_matches_frozen_values(case: PublicCase):
    """Task 1.2: softmax(q k^T / sqrt(hidden)) v on the frozen weights."""
    module = make_self_attention(case.tensors)
    got = run_self_attention(module, case.tensors["x"])
    assert_close(got, case.tensors["output"], task="1.2",
                 what=f"SelfAttention output (case {case.name})")
