"""Part 3: from stacked causal heads to fused heads (Tasks 3.1 to 3.4).

The public cases start from the book's example: the six tokens of "Your
journey starts with one step" as 3-d embeddings, stacked into a batch of
two, with the weights torch.manual_seed(123) gives.
"""
from __future__ import annotations

import pytest
import torch

from .adapters import (gpt2_small_attention, make_causal_attention,
                       make_multi_head_attention, make_wrapper, new_part3,
                       run_part3)
from .cases import PUBLIC_CASES, cases
from .comparison import assert_close, assert_shape
from transformer_lm.test_values import PublicCase

CA, MHW, MHA = ("CausalAttention", "MultiHeadAttentionWrapper",
                "MultiHeadAttention")
BUILD = {CA: make_causal_attention, MHW: make_wrapper,
         MHA: make_multi_head_attention}
TASK = {CA: "3.1", MHW: "3.2", MHA: "3.3"}


def build(case: PublicCase) -> torch.nn.Module:
    """Your module (eval mode) with the case's configuration and weights."""
    cls = case.record["class"]
    return BUILD[cls](case.tensors, case.record["init"])


def by_name(name: str) -> PublicCase:
    return next(case for case in PUBLIC_CASES if case.name == name)


# --------------------------------------------------------------------------
# Values on the frozen cases


@pytest.mark.parametrize("case", cases(CA, mode="eval")
                         + cases(MHW, mode="eval") + cases(MHA, mode="eval"))
def test_output_matches_frozen_values(case: PublicCase):
    """Tasks 3.1-3.3: the output on the book's example (and, for 3.3, on the
    heads of the wrapper case fused with an identity out_proj)."""
    cls = case.record["class"]
    got = run_part3(build(case), case.tensors["x"], TASK[cls])
    assert_close(got, case.tensors["output"], task=TASK[cls],
                 what=f"{cls} output (case {case.name})")


def test_wrapper_output_is_the_heads_side_by_side():
    """Task 3.2: [b, num_tokens, num_heads * d_out], head i's output in
    columns i * d_out to (i + 1) * d_out."""
    x = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(1))
    for num_heads in (1, 2, 3):
        wrapper = new_part3(MHW, d_in=7, d_out=4, context_length=8,
                            dropout=0.0, num_heads=num_heads)
        got = run_part3(wrapper, x, "3.2")
        assert_shape(got, [2, 5, num_heads * 4], task="3.2",
                     what=f"wrapper output with {num_heads} heads of d_out 4")
        for i, head in enumerate(wrapper.heads):
            assert_close(got[..., 4 * i:4 * (i + 1)],
                         run_part3(head, x, "3.1"), task="3.2",
                         what=f"columns of head {i} ({num_heads} heads)")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name)
                                  for c in PUBLIC_CASES
                                  if c.record.get("weights", "").startswith(
                                      "concat:")])
def test_fused_equals_the_wrapper_with_concatenated_weights(
        case: PublicCase):
    """Task 3.3: the fused module whose projections stack the wrapper's
    heads, with out_proj the identity, gives the wrapper's output."""
    wrapper = by_name(case.record["weights"][len("concat:"):])
    got = run_part3(build(case), case.tensors["x"], "3.3")
    assert_close(got, wrapper.tensors["output"], task="3.3",
                 what=f"fused output vs the wrapper's output (case "
                      f"{case.name} vs {wrapper.name})")


def test_your_fused_module_equals_your_wrapper():
    """Task 3.3: the same equivalence with your own two modules, random
    weights, qkv_bias=True, four heads."""
    torch.manual_seed(0)
    wrapper = new_part3(MHW, d_in=5, d_out=3, context_length=9, dropout=0.0,
                        num_heads=4, qkv_bias=True)
    fused = new_part3(MHA, d_in=5, d_out=12, context_length=9, dropout=0.0,
                      num_heads=4, qkv_bias=True)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            for part in ("weight", "bias"):
                stacked = torch.cat([getattr(getattr(head, name), part)
                                     for head in wrapper.heads])
                getattr(getattr(fused, name), part).copy_(stacked)
        fused.out_proj.weight.copy_(torch.eye(12))
        fused.out_proj.bias.zero_()
    x = torch.randn(3, 7, 5)
    assert_close(run_part3(fused, x, "3.3"), run_part3(wrapper, x, "3.2"),
                 task="3.3", what="your fused output vs your wrapper's")


# --------------------------------------------------------------------------
# Causality, the mask, dropout


@pytest.mark.parametrize("name", ["ca_book", "mhw_book", "mha_book"])
def test_changing_the_last_token_changes_only_its_output(name: str):
    """Tasks 3.1-3.3: a token's output depends only on itself and earlier
    tokens."""
    case = by_name(name)
    cls = case.record["class"]
    module, x = build(case), case.tensors["x"]
    changed = x.clone()
    changed[:, -1] = torch.tensor([0.9, -0.4, 0.3])
    before = run_part3(module, x, TASK[cls])
    after = run_part3(module, changed, TASK[cls])
    assert_close(after[:, :-1], before[:, :-1], task=TASK[cls],
                 what=f"outputs of the first five tokens after changing the "
                      f"last one (case {name}): the future must be masked")
    assert not torch.allclose(after[:, -1], before[:, -1]), (
        f"Task {TASK[cls]}: changing the last token did not change its own "
        f"output (case {name})")


@pytest.mark.parametrize("cls", [CA, MHA])
def test_mask_is_cut_to_the_number_of_tokens(cls: str):
    """Tasks 3.1, 3.3: with a context of 10 the six-token example still
    gives the book's values (self.mask[:num_tokens, :num_tokens])."""
    case = by_name("ca_book" if cls == CA else "mha_book")
    init = {**case.record["init"], "context_length": 10}
    module = BUILD[cls](case.tensors, init)
    got = run_part3(module, case.tensors["x"], TASK[cls])
    assert_close(got, case.tensors["output"], task=TASK[cls],
                 what=f"{cls} output with context_length 10 > 6 tokens")


@pytest.mark.parametrize("case", cases(CA, mode="train")
                         + cases(MHA, mode="train"))
def test_dropout_is_applied_to_the_attention_weights(case: PublicCase):
    """Tasks 3.1, 3.3: x is the identity and every head's values are
    [I; I], so a head's output is [A | A] with A its attention weights. In
    train mode both halves must be the same dropped-out weights: every
    entry 0 or A / (1 - p), some dropped, some kept."""
    cls = case.record["class"]
    task, p = TASK[cls], case.record["init"]["dropout"]
    x = case.tensors["x"]
    b, n, _ = x.shape
    heads = case.record["init"].get("num_heads", 1)
    module = build(case).train()
    torch.manual_seed(0)
    out = run_part3(module, x, task)
    assert_shape(out, case.tensors["output"].shape, task=task,
                 what=f"train-mode output (case {case.name})")
    halves = out.view(b, n, heads, 2, n)
    first, second = halves[:, :, :, 0], halves[:, :, :, 1]
    assert_close(second, first, task=task, atol=1e-6, rtol=0,
                 what=f"the two halves of each head's output in train mode "
                      f"(case {case.name}); they differ if dropout is "
                      f"applied to the output instead of the weights")
    eval_weights = case.tensors["attention"].view(b, heads, n, n)
    eval_weights = eval_weights.transpose(1, 2)  # [b, n, heads, n]
    kept = first != 0
    assert_close(torch.where(kept, first, 0.0),
                 torch.where(kept, eval_weights / (1 - p), 0.0),
                 task=task, atol=1e-6, rtol=0,
                 what=f"kept attention weights, scaled by 1 / (1 - p) "
                      f"(case {case.name})")
    positive = eval_weights > 0
    assert (positive & ~kept).any(), (
        f"Task {task}: no attention weight was dropped in train mode with "
        f"dropout={p}: apply self.dropout to the attention weights")
    assert (positive & kept).any(), (
        f"Task {task}: every attention weight was dropped (case "
        f"{case.name})")


# --------------------------------------------------------------------------
# The fused module's sizes


@pytest.mark.parametrize("d_out", [6, 8])
def test_num_heads_must_divide_d_out(d_out: int):
    """Task 3.3: every num_heads that divides d_out works, with heads of
    d_out // num_heads; any other raises ValueError."""
    x = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(d_out))
    for num_heads in range(1, d_out + 2):
        init = dict(d_in=3, d_out=d_out, context_length=4, dropout=0.0,
                    num_heads=num_heads)
        if d_out % num_heads:
            with pytest.raises(ValueError):
                new_part3(MHA, **init)
            continue
        module = new_part3(MHA, **init)
        assert module.head_dim == d_out // num_heads
        assert_shape(run_part3(module, x, "3.3"), [2, 4, d_out], task="3.3",
                     what=f"output (d_out={d_out}, num_heads={num_heads})")


def test_inputs_longer_than_the_context_are_refused():
    """Task 3.3: up to context_length tokens work; more raise ValueError."""
    module = new_part3(MHA, d_in=3, d_out=4, context_length=5, dropout=0.0,
                       num_heads=2)
    x = torch.randn(1, 6, 3, generator=torch.Generator().manual_seed(0))
    assert_shape(run_part3(module, x[:, :5], "3.3"), [1, 5, 4], task="3.3",
                 what="output for exactly context_length tokens")
    with pytest.raises(ValueError):
        module(x)


def test_gpt2_small_attention_sizes():
    """Task 3.4: GPT-2 small's attention: 768 dims, 12 heads of 64, a
    context of 1024, dropout 0.1, biases everywhere."""
    case = by_name("gpt2_small")
    module = gpt2_small_attention()
    assert type(module).__name__ == MHA, (
        f"Task 3.4: expected a MultiHeadAttention, got "
        f"{type(module).__name__}")
    shapes = {name[:-len(".shape")]: value.tolist()
              for name, value in case.tensors.items()
              if name.endswith(".shape")}
    got = {name: list(p.shape) for name, p in module.named_parameters()}
    assert got == shapes, f"Task 3.4: parameters {got}, expected {shapes}"
    count = sum(p.numel() for p in module.parameters())
    assert count == case.tensors["num_parameters"].item(), (
        f"Task 3.4: {count:,} parameters, expected "
        f"{case.tensors['num_parameters'].item():,}")
    assert (module.num_heads, module.head_dim) == (12, 64), (
        f"Task 3.4: {module.num_heads} heads of {module.head_dim}, "
        f"expected 12 heads of 64")
    assert module.dropout.p == pytest.approx(0.1), (
        f"Task 3.4: dropout {module.dropout.p}, expected 0.1")
    assert tuple(module.mask.shape) == (1024, 1024), (
        f"Task 3.4: mask {list(module.mask.shape)}, expected a context of "
        f"1024 tokens")
    out = run_part3(module.eval(), case.tensors["x"], "3.4")
    assert_shape(out, [2, 5, 768], task="3.4", what="output on [2, 5, 768]")
