"""Part 3 of the reference reproduces the book's printed values (Raschka,
"Build a Large Language Model from Scratch", ch. 3) and its edge behaviour."""
from __future__ import annotations

import pytest
import torch

from kit.generate.values import load_reference

# "Your journey starts with one step": the book's 3-d embeddings.
INPUTS = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66],
                       [0.57, 0.85, 0.64], [0.22, 0.58, 0.33],
                       [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
BATCH = torch.stack((INPUTS, INPUTS))
CAUSAL = torch.tensor([[-0.4519, 0.2216], [-0.5874, 0.0058],
                       [-0.6300, -0.0632], [-0.5675, -0.0843],
                       [-0.5526, -0.0981], [-0.5299, -0.1081]])
SECOND_HEAD = torch.tensor([[0.4772, 0.1063], [0.5891, 0.3257],
                            [0.6202, 0.3860], [0.5478, 0.3589],
                            [0.5321, 0.3428], [0.5077, 0.3493]])
FUSED = torch.tensor([[0.3190, 0.4858], [0.2943, 0.3897],
                      [0.2856, 0.3593], [0.2693, 0.3873],
                      [0.2639, 0.3928], [0.2575, 0.4028]])


@pytest.fixture(scope="module")
def ref():
    return load_reference()


def _book(make) -> torch.Tensor:
    torch.manual_seed(123)
    module = make()
    with torch.no_grad():
        out = module(BATCH)
    assert torch.equal(out[0], out[1])
    return out[0]


def test_causal_attention_prints_the_books_values(ref):
    out = _book(lambda: ref.CausalAttention(3, 2, 6, 0.0))
    torch.testing.assert_close(out, CAUSAL, atol=5e-5, rtol=0)


def test_wrapper_prints_the_books_values(ref):
    out = _book(lambda: ref.MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2))
    torch.testing.assert_close(out, torch.cat([CAUSAL, SECOND_HEAD], -1),
                               atol=5e-5, rtol=0)


def test_fused_prints_the_books_values(ref):
    out = _book(lambda: ref.MultiHeadAttention(3, 2, 6, 0.0, 2))
    torch.testing.assert_close(out, FUSED, atol=5e-5, rtol=0)


def test_gpt2_small_attention_sizes(ref):
    module = ref.gpt2_small_attention()
    assert isinstance(module, ref.MultiHeadAttention)
    assert sum(p.numel() for p in module.parameters()) == 2_362_368
    assert (module.num_heads, module.head_dim) == (12, 64)
    assert module.mask.shape == (1024, 1024)
    assert module.dropout.p == 0.1
    assert module.W_query.bias is not None


def test_fused_rejects_indivisible_heads_and_long_inputs(ref):
    with pytest.raises(ValueError, match="divisible"):
        ref.MultiHeadAttention(3, 5, 6, 0.0, 2)
    module = ref.MultiHeadAttention(3, 4, 6, 0.0, 2)
    with pytest.raises(ValueError, match="context"):
        module(torch.randn(1, 7, 3))


def test_wrapper_equals_fused_with_concatenated_weights(ref):
    torch.manual_seed(0)
    wrapper = ref.MultiHeadAttentionWrapper(5, 3, 8, 0.0, 4, qkv_bias=True)
    fused = ref.MultiHeadAttention(5, 12, 8, 0.0, 4, qkv_bias=True)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            for part in ("weight", "bias"):
                getattr(getattr(fused, name), part).copy_(torch.cat([
                    getattr(getattr(h, name), part) for h in wrapper.heads]))
        fused.out_proj.weight.copy_(torch.eye(12))
        fused.out_proj.bias.zero_()
        x = torch.randn(2, 7, 5)
        torch.testing.assert_close(fused(x), wrapper(x), atol=1e-6, rtol=0)
