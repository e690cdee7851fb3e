"""Functional attention with switchable common mistakes.

The test-value generator runs every variant on every case, so the grader can
say "your output equals attention without the 1/sqrt(d) scaling" while holding
nothing but numbers. With no switch flipped these functions equal the
reference modules (the generator refuses to write values otherwise).

Each mistake id here has a student-facing explanation and the items it fails
in ``autograder/mistakes.toml`` (kit_tests/test_mistake_catalogue.py checks
them against the frozen cases).
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
    heads, ``split="swapped"`` the view to ``[b, n, d, h]``."""
    b, n, width = t.shape
    d = width // num_heads
    if split == "transpose":
        return t.view(b, n, num_heads, d).transpose(1, 2)
    if split == "swapped":
        # view(b, n, head_size, num_heads): head_size heads of num_heads
        # entries; the right split when the two sizes happen to be equal.
        return t.view(b, n, d, num_heads).transpose(1, 2)
    return t.reshape(b, num_heads, n, d)


def _hide(seq: int, mask: str) -> torch.Tensor:
    """The positions a causal ``mask`` variant hides: "future" (correct,
    j > i), "future_and_diagonal" (j >= i), "past" (j < i), "inverted"
    (j <= i: an inverted tril mask)."""
    ones = torch.ones(seq, seq, dtype=torch.bool)
    return {"future": ones.triu(1), "future_and_diagonal": ones.triu(0),
            "past": ones.tril(-1), "inverted": ones.tril(0)}[mask]


def _masked(scores: torch.Tensor, mask: str) -> torch.Tensor:
    """Scores with a causal mask applied before the softmax; "multiply"
    multiplies by the 0/1 lower triangle (future scores 0, not -inf);
    "after_softmax" and "none" leave the scores alone."""
    seq = scores.shape[-1]
    if mask in ("none", "after_softmax"):
        return scores
    if mask == "multiply":
        return scores * torch.ones(seq, seq, dtype=scores.dtype).tril()
    if mask == "future_and_diagonal_finite":
        return scores.masked_fill(_hide(seq, "future_and_diagonal"), -1e9)
    return scores.masked_fill(_hide(seq, mask), float("-inf"))


def _after_softmax(probs: torch.Tensor, mask: str) -> torch.Tensor:
    """"after_softmax": -inf written into the probabilities of the future
    (the mask applied after the softmax)."""
    if mask != "after_softmax":
        return probs
    return probs.masked_fill(_hide(probs.shape[-1], "future"), float("-inf"))


def self_attention(x: torch.Tensor, weights: Weights, *,
                   scale: str = "sqrt", softmax_dim: int = -1,
                   scale_on: str = "scores") -> torch.Tensor:
    """Single-head attention; ``scale`` is "sqrt", "none", "linear" (d
    instead of sqrt(d)) or "input" (sqrt(input_size)); ``scale_on``
    "values" divides the values instead of the scores."""
    q, k, v = (_linear(x, weights, n) for n in "qkv")
    scores = q @ k.transpose(1, 2)
    d = q.shape[-1]
    divisor = {"sqrt": d ** 0.5, "none": 1.0, "linear": d,
               "input": x.shape[-1] ** 0.5}[scale]
    if scale_on == "values":
        return torch.softmax(scores, dim=softmax_dim) @ (v / divisor)
    return torch.softmax(scores / divisor, dim=softmax_dim) @ v


def multi_head(x: torch.Tensor, weights: Weights, num_heads: int,
               causal: bool, *, scale: str = "head", softmax_dim: int = -1,
               mask: str = "future", split: str = "transpose",
               merge: str = "transpose", mix: bool = True,
               scale_on: str = "scores", probs_shape: str = "flat",
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-head attention returning ``(att, probs[b*h, s, s])``.

    scale: "head" (sqrt(head_size)), "hidden" (sqrt(hidden)), "heads"
    (sqrt(num_heads)), "input" (sqrt(input_size)) or "none"; scale_on
    "values" divides the values instead of the scores.
    mask (causal only): "future" (correct), "future_and_diagonal" with -inf,
    "future_and_diagonal_finite" with a large negative number, "past" (the
    lower triangle hidden instead), "inverted" (past and diagonal hidden),
    "multiply" (scores times the 0/1 lower triangle), "after_softmax" (-inf
    written into the probabilities), "none" (causal flag ignored).
    split: "transpose" (correct), "no_transpose" (a bare view) or "swapped"
    (view(b, s, head_size, num_heads)); merge: "transpose" or
    "no_transpose". probs_shape "4d" returns them as [b, h, s, s].
    """
    bs, seq, _ = x.shape
    hidden = weights["q.weight"].shape[0]
    hs = hidden // num_heads

    q, k, v = (split_heads(_linear(x, weights, n), num_heads, split)
               for n in "qkv")
    scores = q @ k.transpose(2, 3)
    divisor = {"head": hs ** 0.5, "hidden": hidden ** 0.5,
               "heads": num_heads ** 0.5, "input": x.shape[-1] ** 0.5,
               "none": 1.0}[scale]
    if scale_on == "values":
        v = v / divisor
    else:
        scores = scores / divisor
    if causal:
        scores = _masked(scores, mask)
    probs = torch.softmax(scores, dim=softmax_dim)
    if causal:
        probs = _after_softmax(probs, mask)
    att = probs @ v
    if merge == "transpose":
        att = att.transpose(1, 2).reshape(bs, seq, hidden)
    else:
        att = att.reshape(bs, seq, hidden)
    if mix:
        att = _linear(att, weights, "mix")
    if probs_shape == "4d":
        return att, probs
    # reshape(-1, ...): a swapped view has head_size "heads".
    return att, probs.reshape(-1, seq, seq)


# id -> keyword arguments of the variant. Applies to self-attention cases
# when listed in SELF_ATTENTION_MISTAKES, to multi-head ones when listed in
# MULTI_HEAD_MISTAKES (causal-only ones are skipped on non-causal cases).
SELF_ATTENTION_MISTAKES: dict[str, dict] = {
    "no_scale": {"scale": "none"},
    "scale_not_sqrt": {"scale": "linear"},
    "scale_input_size": {"scale": "input"},
    "scale_values": {"scale_on": "values"},
    "softmax_wrong_axis": {"softmax_dim": 1},
}
MULTI_HEAD_MISTAKES: dict[str, dict] = {
    "no_scale": {"scale": "none"},
    "scale_hidden": {"scale": "hidden"},
    "scale_num_heads": {"scale": "heads"},
    "scale_input_size": {"scale": "input"},
    "scale_values": {"scale_on": "values"},
    "softmax_wrong_axis": {"softmax_dim": -2},
    "split_no_transpose": {"split": "no_transpose"},
    "split_swapped": {"split": "swapped"},
    "merge_no_transpose": {"merge": "no_transpose"},
    "no_mix": {"mix": False},
    "probs_not_flattened": {"probs_shape": "4d"},
}
CAUSAL_MISTAKES: dict[str, dict] = {
    "mask_diagonal": {"mask": "future_and_diagonal"},
    "mask_diagonal_finite": {"mask": "future_and_diagonal_finite"},
    "mask_past": {"mask": "past"},
    "mask_inverted": {"mask": "inverted"},
    "mask_multiply": {"mask": "multiply"},
    "mask_after_softmax": {"mask": "after_softmax"},
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
    return v @ w_mix.permute(1, 2, 0)   # [b, h, t, k] @ [h, k, d]


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
                    softmax_dim: int, context_length: int | None = None
                    ) -> torch.Tensor:
    """Softmax of masked scores [..., n, n]; ``mask`` as in
    :func:`multi_head`, or "uncut": the whole [context_length,
    context_length] mask, which raises torch's size error unless
    n == context_length."""
    if mask == "uncut":
        full = torch.ones(context_length, context_length,
                          dtype=torch.bool).triu(1)
        scores = scores.masked_fill(full, float("-inf"))
    else:
        scores = _masked(scores, mask)
    return _after_softmax(torch.softmax(scores / divisor, dim=softmax_dim),
                          mask)


def causal_attention(x: torch.Tensor, weights: Weights, *, prefix: str = "",
                     scale: str = "key", mask: str = "future",
                     softmax_dim: int = -1, scale_on: str = "scores",
                     context_length: int | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """One CausalAttention head (eval mode): ``(context [b, n, d_out],
    attention weights [b, n, n])``.

    scale: "key" (sqrt(d_out), correct), "d_in" or "none"; scale_on
    "values" divides the values instead of the scores.
    mask: see :func:`_causal_weights`.
    prefix: state-dict prefix of the head, e.g. "heads.1.".
    """
    q, k, v = (_linear_opt(x, weights, prefix + name)
               for name in ("W_query", "W_key", "W_value"))
    divisor = {"key": k.shape[-1] ** 0.5, "d_in": x.shape[-1] ** 0.5,
               "none": 1.0}[scale]
    if scale_on == "values":
        v, divisor = v / divisor, 1.0
    probs = _causal_weights(q @ k.transpose(1, 2), divisor, mask,
                            softmax_dim, context_length)
    return probs @ v, probs


def multi_head_wrapper(x: torch.Tensor, weights: Weights, num_heads: int,
                       *, interleave: bool = False, **mistake
                       ) -> torch.Tensor:
    """MultiHeadAttentionWrapper: the heads' contexts concatenated; a
    CausalAttention mistake applies to every head. ``interleave``: the
    wrapper's own mistake of stacking the heads on a new last dimension
    and flattening it, which interleaves their features."""
    contexts = [causal_attention(x, weights, prefix=f"heads.{i}.",
                                 **mistake)[0] for i in range(num_heads)]
    if interleave:
        return torch.stack(contexts, dim=-1).flatten(-2)
    return torch.cat(contexts, dim=-1)


def multi_head_attention(x: torch.Tensor, weights: Weights, num_heads: int,
                         *, scale: str = "head", mask: str = "future",
                         softmax_dim: int = -1, split: str = "transpose",
                         merge: str = "transpose", out_proj: bool = True,
                         scale_on: str = "scores",
                         context_length: int | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused MultiHeadAttention (eval mode): ``(output [b, n, d_out],
    attention weights [b, num_heads, n, n])``.

    scale: "head" (sqrt(head_dim), correct), "d_out", "d_in", "heads"
    (sqrt(num_heads)) or "none"; scale_on "values" divides the values.
    split: "transpose" (correct), "no_transpose" (a bare view) or
    "swapped" (view(b, n, head_dim, num_heads)); merge: "transpose" or
    "no_transpose". mask: see :func:`_causal_weights`.
    """
    b, n, d_in = x.shape
    d_out = weights["W_query.weight"].shape[0]
    hd = d_out // num_heads

    q, k, v = (split_heads(_linear_opt(x, weights, name), num_heads, split)
               for name in ("W_query", "W_key", "W_value"))
    divisor = {"head": hd ** 0.5, "d_out": d_out ** 0.5, "d_in": d_in ** 0.5,
               "heads": num_heads ** 0.5, "none": 1.0}[scale]
    if scale_on == "values":
        v, divisor = v / divisor, 1.0
    probs = _causal_weights(q @ k.transpose(2, 3), divisor, mask,
                            softmax_dim, context_length)
    context = probs @ v
    if merge == "transpose":
        context = context.transpose(1, 2)
    context = context.reshape(b, n, d_out)
    if out_proj:
        context = _linear_opt(context, weights, "out_proj")
    return context, probs


# Part 3 ids (explanations in autograder/mistakes.toml). CAUSAL_MISTAKES_P3
# apply to CausalAttention and, head by head, to the wrapper; the fused
# module has them plus FUSED_MISTAKES; WRAPPER_MISTAKES are the wrapper's
# own. "causal_mask_uncut" raises torch's size error (no output) on inputs
# shorter than the context: its variant is called with context_length.
CAUSAL_MISTAKES_P3: dict[str, dict] = {
    "causal_no_scale": {"scale": "none"},
    "causal_scale_d_in": {"scale": "d_in"},
    "causal_scale_values": {"scale_on": "values"},
    "causal_softmax_wrong_axis": {"softmax_dim": -2},
    "causal_mask_diagonal": {"mask": "future_and_diagonal"},
    "causal_mask_inverted": {"mask": "inverted"},
    "causal_mask_multiply": {"mask": "multiply"},
    "causal_mask_after_softmax": {"mask": "after_softmax"},
    "causal_mask_uncut": {"mask": "uncut"},
    "causal_mask_ignored": {"mask": "none"},
}
# Mistakes whose code raises (torch's size error) where it has no output.
RAISES = {"causal_mask_uncut"}
WRAPPER_MISTAKES: dict[str, dict] = {
    "wrapper_interleaved": {"interleave": True},
}
FUSED_MISTAKES: dict[str, dict] = {
    "fused_scale_d_out": {"scale": "d_out"},
    "fused_scale_num_heads": {"scale": "heads"},
    "fused_split_no_transpose": {"split": "no_transpose"},
    "fused_split_swapped": {"split": "swapped"},
    "fused_merge_no_transpose": {"merge": "no_transpose"},
    "fused_no_out_proj": {"out_proj": False},
}


def catalogue(cls: str, causal: bool = True) -> dict[str, dict]:
    """Mistake id -> variant keywords of every catalogue mistake that can
    show in a case of class ``cls`` (Part 2's causal ones on causal cases
    only)."""
    if cls == "SelfAttention":
        return dict(SELF_ATTENTION_MISTAKES)
    if cls == "MultiHeadSelfAttention":
        return {**MULTI_HEAD_MISTAKES, **(CAUSAL_MISTAKES if causal else {})}
    if cls == "CausalAttention":
        return dict(CAUSAL_MISTAKES_P3)
    if cls == "MultiHeadAttentionWrapper":
        return {**CAUSAL_MISTAKES_P3, **WRAPPER_MISTAKES}
    if cls == "MultiHeadAttention":
        return {**CAUSAL_MISTAKES_P3, **FUSED_MISTAKES}
    return {}


def written_in(cls: str) -> dict[str, dict]:
    """The mistakes whose code lives in class ``cls`` (the wrapper's cases
    also show its heads' mistakes, but those are CausalAttention's)."""
    if cls == "MultiHeadAttentionWrapper":
        return dict(WRAPPER_MISTAKES)
    return catalogue(cls)


def run(cls: str, init: dict, x: torch.Tensor, weights: Weights,
        **mistake) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(output, attention)`` of a case of class ``cls`` with the variant
    ``mistake`` (none: the reference's answer). ``attention`` is the
    probabilities [b*h, s, s] for Part 2, the weights for Part 3's single
    and fused heads, None for the wrapper. May raise, as the mistake's
    code would (``causal_mask_uncut``)."""
    if mistake.get("mask") == "uncut":
        mistake = {**mistake, "context_length": init["context_length"]}
    if cls == "SelfAttention":
        return self_attention(x, weights, **mistake), None
    if cls == "MultiHeadSelfAttention":
        return multi_head(x, weights, init["num_heads"], init["causal"],
                          **mistake)
    if cls == "CausalAttention":
        return causal_attention(x, weights, **mistake)
    if cls == "MultiHeadAttentionWrapper":
        return multi_head_wrapper(x, weights, init["num_heads"],
                                  **mistake), None
    if cls == "MultiHeadAttention":
        return multi_head_attention(x, weights, init["num_heads"],
                                    **mistake)
    raise ValueError(f"no catalogue for {cls}")
