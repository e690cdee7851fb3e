"""The reference's named steps on a case, frozen beside its output.

Each class's computation written out step by step in the canonical layout
the grader's diagnosis compares against (``autograder/checks/diagnosis/
steps.py`` names them): q, k, v, the scores, scaled and masked (both
orders, so a correct solution in either order stays on the path), the
weights, the context, the heads merged and the output. Computed from the
reference module's own float64 layers under ``kit/generate/exact.py``, in eval
mode; ``kit/generate/values.py`` checks that the last step is the
reference's output before it freezes them.
"""
from __future__ import annotations

import torch

from autograder.checks.diagnosis.steps import PREFIX

# The classes whose steps are frozen (the wrapper is its heads' steps;
# gpt2_small_attention is judged by its size).
CLASSES = ("SelfAttention", "MultiHeadSelfAttention", "CausalAttention",
           "MultiHeadAttention")


# Per class: the size each head's scores are divided by the root of, named
# as the class's docstring says it, from the constructor's arguments:
# (name, the init argument, the init argument it is divided by or None).
SCALES = {"SelfAttention": ("hidden", "hidden", None),
          "MultiHeadSelfAttention": ("head_size", "hidden", "num_heads"),
          "CausalAttention": ("d_out", "d_out", None),
          "MultiHeadAttention": ("head_dim", "d_out", "num_heads")}


def scale(cls: str, init: dict) -> dict | None:
    """``{"name": ..., "size": ...}``: what a case of ``cls`` scales its
    scores by (frozen in the manifest for the diagnosis), or None for a
    class without steps."""
    if cls not in SCALES:
        return None
    name, size, per = SCALES[cls]
    return {"name": name, "size": init[size] // (init[per] if per else 1)}


# Per class: the layer (attribute) each projection step comes from; the
# manifest carries it to the diagnosis, which names a layer whose bias is
# left out.
LAYERS = {
    "SelfAttention": {"q": "q", "k": "k", "v": "v"},
    "MultiHeadSelfAttention": {"q": "q", "k": "k", "v": "v",
                               "output": "mix"},
    "CausalAttention": {"q": "W_query", "k": "W_key", "v": "W_value"},
    "MultiHeadAttention": {"q": "W_query", "k": "W_key", "v": "W_value",
                           "output": "out_proj"},
}


def layers(cls: str) -> dict[str, str]:
    """Step -> the attribute of the layer computing it, for ``cls`` (empty
    for a class without steps)."""
    return dict(LAYERS.get(cls, {}))


def _layers(cls: str, module: torch.nn.Module) -> tuple:
    names = LAYERS[cls]
    return tuple(getattr(module, names[step]) if step in names else None
                 for step in ("q", "k", "v", "output"))


def reference_steps(cls: str, init: dict, module: torch.nn.Module,
                    x64: torch.Tensor) -> dict[str, torch.Tensor]:
    """``step.<name>`` -> float64 tensor for one case (empty for a class
    without steps). Call under ``kit.generate.exact.exact()`` and
    ``no_grad``."""
    if cls not in CLASSES:
        return {}
    b, s, _ = x64.shape
    wq, wk, wv, out = _layers(cls, module)
    heads = init.get("num_heads", 1) if cls in (
        "MultiHeadSelfAttention", "MultiHeadAttention") else 1
    q, k, v = wq(x64), wk(x64), wv(x64)
    if heads > 1 or out is not None:
        size = q.shape[-1] // heads
        q, k, v = (t.view(b, s, heads, size).transpose(1, 2)
                   for t in (q, k, v))
    else:
        size = q.shape[-1]
    steps = {"q": q, "k": k, "v": v}
    scores = q @ k.transpose(-2, -1)
    scale = size ** 0.5
    steps["scores"] = scores
    steps["scaled"] = scores / scale
    causal = cls in ("CausalAttention", "MultiHeadAttention") or \
        bool(init.get("causal"))
    last = steps["scaled"]
    if causal:
        future = torch.ones(s, s, dtype=torch.bool).triu(1)
        steps["masked"] = scores.masked_fill(future, float("-inf"))
        steps["scaled_masked"] = steps["masked"] / scale
        last = steps["scaled_masked"]
    weights = torch.softmax(last, dim=-1)
    steps["weights"] = weights
    context = weights @ v
    if out is None:
        steps["output"] = context
    else:
        steps["context"] = context
        merged = context.transpose(1, 2).reshape(b, s, -1)
        steps["merged"] = merged
        steps["output"] = out(merged)
    return {PREFIX + name: t for name, t in steps.items()}
