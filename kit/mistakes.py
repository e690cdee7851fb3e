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

    def heads(t: torch.Tensor) -> torch.Tensor:
        if split == "transpose":
            return t.view(bs, seq, num_heads, hs).transpose(1, 2)
        return t.reshape(bs, num_heads, seq, hs)

    q, k, v = (heads(_linear(x, weights, n)) for n in "qkv")
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
