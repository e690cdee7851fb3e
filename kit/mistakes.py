"""Functional attention with switchable common mistakes.

The test-value generator runs every variant on every case, so the grader can
say "your output equals attention without the 1/sqrt(d) scaling" while holding
nothing but numbers. With no switch flipped these functions equal the
reference modules (kit_tests/test_mistakes.py proves it).

Each mistake id here has a student-facing explanation in
``autograder/mistakes.toml``.
"""
from __future__ import annotations

import torch

Weights = dict[str, torch.Tensor]


def _linear(x: torch.Tensor, weights: Weights, name: str) -> torch.Tensor:
    return x @ weights[f"{name}.weight"].T + weights[f"{name}.bias"]


def split_heads(t: torch.Tensor, num_heads: int,
                split: str = "transpose") -> torch.Tensor:
    """``[b, n, h * d]`` -> ``[b, h, n, d]``; ``split="no_transpose"`` is
    the common mistake of a bare reshape, which mixes positions into
    heads."""
    b, n, width = t.shape
    d = width // num_heads
    if split == "transpose":
        return t.view(b, n, num_heads, d).transpose(1, 2)
    return t.reshape(b, num_heads, n, d)


def self_attention(x: torch.Tensor, weights: Weights, *,
                   scale: str = "sqrt", softmax_dim: int = -1) -> torch.Tensor:
    """Single-head attention; ``scale`` is "sqrt", "none" or "linear"."""
    q, k, v = (_linear(x, weights, n) for n in "qkv")
    scores = q @ k.transpose(1, 2)
    d = q.shape[-1]
    scores = scores / {"sqrt": d ** 0.5, "none": 1.0, "linear": d}[scale]
    return torch.softmax(scores, dim=softmax_dim) @ v


def multi_head(x: torch.Tensor, weights: Weights, num_heads: int,
               causal: bool, *, scale: str = "head", softmax_dim: int = -1,
               mask: str = "future", split: str = "transpose",
               merge: str = "transpose", mix: bool = True,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-head attention returning ``(att, probs[b*h, s, s])``.

    scale: "head" (sqrt(head_size)), "hidden" (sqrt(hidden)) or "none".
    mask (causal only): "future" (correct), "future_and_diagonal" with -inf,
    "future_and_diagonal_finite" with a large negative number, "past" (the
    lower triangle hidden instead), "none" (causal flag ignored).
    split/merge: "transpose" (correct) or "no_transpose" (a bare view).
    """
    bs, seq, _ = x.shape
    hidden = weights["q.weight"].shape[0]
    hs = hidden // num_heads

    q, k, v = (split_heads(_linear(x, weights, n), num_heads, split)
               for n in "qkv")
    scores = q @ k.transpose(2, 3)
    scores = scores / {"head": hs ** 0.5, "hidden": hidden ** 0.5,
                       "none": 1.0}[scale]
    if causal and mask != "none":
        ones = torch.ones(seq, seq, dtype=torch.bool)
        hide, fill = {
            "future": (ones.triu(1), float("-inf")),
            "future_and_diagonal": (ones.triu(0), float("-inf")),
            "future_and_diagonal_finite": (ones.triu(0), -1e9),
            "past": (ones.tril(-1), float("-inf")),
        }[mask]
        scores = scores.masked_fill(hide, fill)
    probs = torch.softmax(scores, dim=softmax_dim)
    att = probs @ v
    if merge == "transpose":
        att = att.transpose(1, 2).reshape(bs, seq, hidden)
    else:
        att = att.reshape(bs, seq, hidden)
    if mix:
        att = _linear(att, weights, "mix")
    return att, probs.reshape(bs * num_heads, seq, seq)


# id -> keyword arguments of the variant. Applies to self-attention cases
# when listed in SELF_ATTENTION_MISTAKES, to multi-head ones when listed in
# MULTI_HEAD_MISTAKES (causal-only ones are skipped on non-causal cases).
SELF_ATTENTION_MISTAKES: dict[str, dict] = {
    "no_scale": {"scale": "none"},
    "scale_not_sqrt": {"scale": "linear"},
    "softmax_wrong_axis": {"softmax_dim": 1},
}
MULTI_HEAD_MISTAKES: dict[str, dict] = {
    "no_scale": {"scale": "none"},
    "scale_hidden": {"scale": "hidden"},
    "softmax_wrong_axis": {"softmax_dim": -2},
    "split_no_transpose": {"split": "no_transpose"},
    "merge_no_transpose": {"merge": "no_transpose"},
    "no_mix": {"mix": False},
}
CAUSAL_MISTAKES: dict[str, dict] = {
    "mask_diagonal": {"mask": "future_and_diagonal"},
    "mask_diagonal_finite": {"mask": "future_and_diagonal_finite"},
    "mask_past": {"mask": "past"},
    "mask_ignored": {"mask": "none"},
}


def value_mix(x: torch.Tensor, weights: Weights,
              num_heads: int) -> torch.Tensor:
    """``[b, h, s, hidden]`` tensor G with att = einsum(P, G) + mix.bias.

    ``att`` is affine in the attention probabilities, so any returned
    probabilities (dropped out or not) determine the output they should give.
    """
    bs, seq, _ = x.shape
    hidden = weights["q.weight"].shape[0]
    hs = hidden // num_heads
    v = _linear(x, weights, "v").view(bs, seq, num_heads, hs).transpose(1, 2)
    w_mix = weights["mix.weight"].view(hidden, num_heads, hs)
    return torch.einsum("bhtk,dhk->bhtd", v, w_mix)


# --------------------------------------------------------------------------
# Part 3: the book's causal heads (CausalAttention, MultiHeadAttentionWrapper)
# and the fused MultiHeadAttention. Weights by state-dict path, biases
# optional (qkv_bias=False has none).

def _linear_opt(x: torch.Tensor, weights: Weights,
                name: str) -> torch.Tensor:
    out = x @ weights[f"{name}.weight"].T
    bias = weights.get(f"{name}.bias")
    return out if bias is None else out + bias


def _causal_weights(scores: torch.Tensor, divisor: float, mask: str,
                    softmax_dim: int) -> torch.Tensor:
    """Softmax of masked scores [..., n, n]; mask "future" (correct),
    "future_and_diagonal" or "none"."""
    n = scores.shape[-1]
    if mask != "none":
        diagonal = {"future": 1, "future_and_diagonal": 0}[mask]
        hide = torch.ones(n, n, dtype=torch.bool).triu(diagonal)
        scores = scores.masked_fill(hide, float("-inf"))
    return torch.softmax(scores / divisor, dim=softmax_dim)


def causal_attention(x: torch.Tensor, weights: Weights, *, prefix: str = "",
                     scale: str = "key", mask: str = "future",
                     softmax_dim: int = -1
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """One CausalAttention head (eval mode): ``(context [b, n, d_out],
    attention weights [b, n, n])``.

    scale: "key" (sqrt(d_out), correct), "d_in" or "none".
    prefix: state-dict prefix of the head, e.g. "heads.1.".
    """
    q, k, v = (_linear_opt(x, weights, prefix + name)
               for name in ("W_query", "W_key", "W_value"))
    divisor = {"key": k.shape[-1] ** 0.5, "d_in": x.shape[-1] ** 0.5,
               "none": 1.0}[scale]
    probs = _causal_weights(q @ k.transpose(1, 2), divisor, mask,
                            softmax_dim)
    return probs @ v, probs


def multi_head_wrapper(x: torch.Tensor, weights: Weights, num_heads: int,
                       **mistake) -> torch.Tensor:
    """MultiHeadAttentionWrapper: the heads' contexts concatenated; a
    mistake applies to every head."""
    return torch.cat([causal_attention(x, weights, prefix=f"heads.{i}.",
                                       **mistake)[0]
                      for i in range(num_heads)], dim=-1)


def multi_head_attention(x: torch.Tensor, weights: Weights, num_heads: int,
                         *, scale: str = "head", mask: str = "future",
                         softmax_dim: int = -1, split: str = "transpose",
                         merge: str = "transpose", out_proj: bool = True
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused MultiHeadAttention (eval mode): ``(output [b, n, d_out],
    attention weights [b, num_heads, n, n])``.

    scale: "head" (sqrt(head_dim), correct), "d_out", "d_in" or "none".
    split/merge: "transpose" (correct) or "no_transpose" (a bare view).
    """
    b, n, d_in = x.shape
    d_out = weights["W_query.weight"].shape[0]
    hd = d_out // num_heads

    q, k, v = (split_heads(_linear_opt(x, weights, name), num_heads, split)
               for name in ("W_query", "W_key", "W_value"))
    divisor = {"head": hd ** 0.5, "d_out": d_out ** 0.5, "d_in": d_in ** 0.5,
               "none": 1.0}[scale]
    probs = _causal_weights(q @ k.transpose(2, 3), divisor, mask,
                            softmax_dim)
    context = probs @ v
    if merge == "transpose":
        context = context.transpose(1, 2)
    context = context.reshape(b, n, d_out)
    if out_proj:
        context = _linear_opt(context, weights, "out_proj")
    return context, probs


# Part 3 ids (explanations in autograder/mistakes.toml). CAUSAL_MISTAKES_P3
# apply to CausalAttention and, head by head, to the wrapper; the fused
# module has them plus FUSED_MISTAKES.
CAUSAL_MISTAKES_P3: dict[str, dict] = {
    "causal_no_scale": {"scale": "none"},
    "causal_scale_d_in": {"scale": "d_in"},
    "causal_softmax_wrong_axis": {"softmax_dim": -2},
    "causal_mask_diagonal": {"mask": "future_and_diagonal"},
    "causal_mask_ignored": {"mask": "none"},
}
FUSED_MISTAKES: dict[str, dict] = {
    "fused_scale_d_out": {"scale": "d_out"},
    "fused_split_no_transpose": {"split": "no_transpose"},
    "fused_merge_no_transpose": {"merge": "no_transpose"},
    "fused_no_out_proj": {"out_proj": False},
}
