"""Part 2: multi-head self-attention (Tasks 2.1 to 2.3)."""
from __future__ import annotations

import pytest
import torch

from .adapters import make_multi_head, new_multi_head, run_multi_head
from .cases import cases
from .comparison import assert_close, assert_shape
from transformer_lm.test_values import PublicCase

MH = "MultiHeadSelfAttention"


def build(case: PublicCase) -> torch.nn.Module:
    """Your module (eval mode) with the case's configuration and weights."""
    init = case.record["init"]
    return make_multi_head(case.tensors, init["num_heads"], init["causal"],
                           init["dropout"])


def expected_probs_shape(case: PublicCase) -> list[int]:
    batch, seq, _ = case.tensors["x"].shape
    return [batch * case.record["init"]["num_heads"], seq, seq]


@pytest.mark.parametrize("case", cases(MH, causal=False))
def test_attention_probabilities(case: PublicCase):
    """Task 2.1: the per-head probabilities, [batch * num_heads, seq, seq]
    with the heads of one batch element next to each other."""
    _, probs = run_multi_head(build(case), case.tensors["x"],
                              return_attention=True, task="2.1")
    what = f"attention probabilities (case {case.name})"
    assert_shape(probs, expected_probs_shape(case), task="2.1", what=what)
    assert_close(probs, case.tensors["attention"], task="2.1", what=what)


@pytest.mark.parametrize("case", cases(MH, causal=True))
def test_causal_attention_probabilities(case: PublicCase):
    """Task 2.2: with causal=True no query attends to a later position."""
    _, probs = run_multi_head(build(case), case.tensors["x"],
                              return_attention=True, task="2.2")
    what = f"causal attention probabilities (case {case.name})"
    assert_shape(probs, expected_probs_shape(case), task="2.2", what=what)
    assert_close(probs, case.tensors["attention"], task="2.2", what=what)


@pytest.mark.parametrize("case", cases(MH))
def test_output(case: PublicCase):
    """Task 2.3: the mixed output of all heads, causal and not."""
    got = run_multi_head(build(case), case.tensors["x"])
    causal = "causal" if case.record["init"]["causal"] else "not causal"
    assert_close(got, case.tensors["output"], task="2.3",
                 what=f"MultiHeadSelfAttention output, {causal} "
                      f"(case {case.name})")


@pytest.mark.parametrize("case", cases(MH, causal=True))
def test_changing_a_future_token_leaves_earlier_outputs_alone(
        case: PublicCase):
    """Task 2.2: the output at position t depends only on x[:, :t + 1]."""
    module = build(case)
    x = case.tensors["x"]
    before = run_multi_head(module, x, task="2.2")
    generator = torch.Generator().manual_seed(0)
    for t in range(x.shape[1] - 1):
        changed = x.clone()
        changed[:, t + 1:] = torch.randn(changed[:, t + 1:].shape,
                                         generator=generator)
        after = run_multi_head(module, changed, task="2.2")
        assert_close(after[:, :t + 1], before[:, :t + 1], task="2.2",
                     what=f"outputs at positions 0..{t} after changing "
                          f"the tokens after position {t} "
                          f"(case {case.name})")


@pytest.mark.parametrize("case", cases(MH, mode="train"))
def test_dropout_drops_probabilities_in_train_mode(case: PublicCase):
    """Task 2.3: in train mode dropout zeroes probabilities and rescales
    the others by 1 / (1 - p); the output uses the dropped-out ones."""
    module = build(case).train()
    p = case.record["init"]["dropout"]
    torch.manual_seed(0)
    att, probs = run_multi_head(module, case.tensors["x"],
                                return_attention=True)
    what = f"attention probabilities in train mode (case {case.name})"
    assert_shape(probs, expected_probs_shape(case), task="2.3", what=what)
    kept = probs != 0
    assert not kept.all(), (
        f"Task 2.3: no probability was dropped in train mode with "
        f"dropout={p}: apply self.dropout to the probabilities")
    expected = torch.where(kept, case.tensors["attention"] / (1 - p), 0.0)
    assert_close(probs, expected, task="2.3",
                 what=f"{what}, where not dropped")
    # value_mix lets the output be predicted from any probabilities.
    batch, seq, _ = case.tensors["x"].shape
    heads = case.record["init"]["num_heads"]
    expected_att = torch.einsum(
        "bhst,bhtd->bsd", probs.reshape(batch, heads, seq, seq),
        case.tensors["value_mix"]) + case.tensors["mix.bias"]
    assert_close(att, expected_att, task="2.3",
                 what=f"train-mode output given the returned probabilities "
                      f"(case {case.name})")


@pytest.mark.parametrize("hidden", [6, 9, 12])
def test_num_heads_must_divide_hidden(hidden: int):
    """Task 2.1: every num_heads that divides hidden works, with heads of
    hidden // num_heads; any other raises ValueError."""
    x = torch.randn(2, 4, 5, generator=torch.Generator().manual_seed(hidden))
    for num_heads in range(1, hidden + 2):
        if hidden % num_heads:
            with pytest.raises(ValueError):
                new_multi_head(5, hidden, num_heads)
            continue
        module = new_multi_head(5, hidden, num_heads)
        att, probs = run_multi_head(module, x, return_attention=True,
                                    task="2.1")
        where = f"hidden={hidden}, num_heads={num_heads}"
        assert_shape(att, [2, 4, hidden], task="2.1",
                     what=f"output ({where})")
        assert_shape(probs, [2 * num_heads, 4, 4], task="2.1",
                     what=f"attention probabilities ({where})")
