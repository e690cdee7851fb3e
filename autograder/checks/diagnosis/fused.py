"""Causes inside a fused attention call (``F.scaled_dot_product_attention``),
each proven by replaying the student's recorded call
(``ProbeResult.fused``, ``sandbox/fused_recorder.py``) here with one
argument fixed.

The call hides its scores and weights, so the walk sees only its output
leave the path. A cause is named only when (1) replaying the call as
recorded gives the student's own output at that line (the record is the
call that made it), and (2) replaying it with the named fix (q and k back
in order, the bool mask inverted, a 0/1 float mask made a bool one,
is_causal flipped, another scale) gives the reference's values there
within tolerance. A call with dropout is never replayed (its draws are
not recorded).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from autograder.checks.diagnosis.flow import MASKED, Divergence, layouts, same
from autograder.checks.diagnosis.relations import Relation, name_number
from autograder.checks.diagnosis.steps import STEPS
from autograder.sandbox.protocol import FusedCall

CALL = "`F.scaled_dot_product_attention`"


# Scores a replay may build (queries x keys x the leading dimensions):
# the recorded arguments are capped, the matrix of their scores is not
# (65,536 queries against 65,536 keys is 17 GB), and it is built here, in
# the parent.
MAX_SCORES = 1 << 22


def _replay(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            mask: torch.Tensor | None, causal: bool, scale: float | None
            ) -> torch.Tensor | None:
    if q.dim() < 2 or k.dim() < 2 or q.numel() // max(q.shape[-1], 1) * \
            k.shape[-2] > MAX_SCORES:
        return None
    try:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=causal,
            scale=scale)
    except (RuntimeError, ValueError, TypeError):
        return None


def _mask(call: FusedCall) -> torch.Tensor | None:
    if not call.mask:
        return None
    mask = call.tensors[3]
    return mask > 0.5 if call.mask == "bool" else mask


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _split_fix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None, causal: bool,
               scale: float | None, heads: int
               ) -> list[tuple[str, str, Callable[[], torch.Tensor | None]]]:
    """The fix "split the heads" for a call given [b, s, heads * d]
    tensors where the reference has ``heads`` heads: each split into
    [b, heads, s, d], the call replayed, its result merged back."""
    if heads < 2 or q.dim() != 3 or k.dim() != 3 or v.dim() != 3 or \
            any(t.shape[-1] % heads for t in (q, k, v)):
        return []
    b, s, width = q.shape

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(t.shape[0], t.shape[1], heads, -1).transpose(1, 2)

    def replay() -> torch.Tensor | None:
        out = _replay(split(q), split(k), split(v), mask, causal, scale)
        return None if out is None else \
            out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
    size = width // heads
    return [("fused: heads not split",
             f"Your {CALL} gets q as [{b}, {s}, {width}], the heads not "
             f"split, so it computes one head of size {width}. Split q, k "
             f"and v into {heads} heads of {size} first "
             f"(`.view(b, s, {heads}, {size}).transpose(1, 2)`) and merge "
             f"the result back: then it gives the expected values.",
             replay)]


def _fixes(call: FusedCall, head: int, head_name: str,
           sizes: dict[str, int], heads: int = 1
           ) -> list[tuple[str, str, Callable[[], torch.Tensor | None]]]:
    """(key, words, replay with the fix) for each fix that changes the
    call (``heads``: the reference's number of heads)."""
    q, k, v = call.tensors[:3]
    mask = _mask(call)
    causal, scale = call.is_causal, call.scale
    found = _split_fix(q, k, v, mask, causal, scale, heads)
    found.append((
        "fused: q and k swapped",
        f"Your {CALL} gets the keys where the queries belong and the "
        f"queries where the keys belong: called with them back in order, "
        f"(q, k, v), it gives the expected values.",
        lambda: _replay(k, q, v, mask, causal, scale)))
    if call.mask == "bool":
        found.append((
            "fused: bool mask inverted",
            f"Your {CALL} gets a bool `attn_mask` that is True on the "
            f"positions to hide; in this call True means *take part* (a "
            f"bool mask keeps where it is True). With the mask inverted "
            f"(`~mask`) it gives the expected values.",
            lambda: _replay(q, k, v, ~mask, causal, scale)))
    if call.mask == "float" and bool(((mask == 0) | (mask == 1)).all()):
        found.append((
            "fused: float mask of 0 and 1",
            f"Your {CALL} gets a float `attn_mask` of 0 and 1: a float "
            f"mask is *added* to the scores, so its 1s only shift them and "
            f"hide nothing. Pass the bool mask that is True where a query "
            f"may look (`mask == 0`): with it the call gives the expected "
            f"values.",
            lambda: _replay(q, k, v, mask == 0, causal, scale)))
    if causal and mask is None:
        found.append((
            "fused: is_causal where nothing is hidden",
            f"Your {CALL} passes `is_causal=True`, which hides every key "
            f"after its query; this class attends to every position: "
            f"called without it, it gives the expected values.",
            lambda: _replay(q, k, v, None, False, scale)))
    if mask is not None and not causal:
        found += _causal_mask_fix(q, k, v, mask, scale)
    used = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    want = 1 / math.sqrt(head)
    if abs(used - want) > 1e-6 * want:
        now = _scale_words(used, sizes, head_name)
        found.append((
            "fused: scale",
            f"Your {CALL} multiplies the scores by {now}; the expected "
            f"scores are divided by sqrt({head_name} = {head}): with "
            f"`scale=1 / math.sqrt({head_name})` (the call's `scale` "
            f"multiplies, it is not a divisor) it gives the expected "
            f"values.",
            lambda: _replay(q, k, v, mask, causal, want)))
    if abs(used - 1.0) > 1e-6:
        found.append((
            "fused: scaled twice",
            f"Your {CALL} scales the scores by {_fmt(used)} (its "
            f"`scale`, 1/sqrt of the last dimension unless given) after "
            f"they were already scaled before the call: called with "
            f"`scale=1.0` it gives the expected values. Scale once: "
            f"leave q (and k) unscaled before the call.",
            lambda: _replay(q, k, v, mask, causal, 1.0)))
    return found


def _causal_mask_fix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor, scale: float | None
                     ) -> list[tuple[str, str, Callable[[], torch.Tensor
                                                        | None]]]:
    """The fix "pass the causal mask", worded by where the student's mask
    differs from it (the diagonal, below it, above it); none when the
    mask cannot be read as [queries, keys] or already is the causal one."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    if mask.dim() < 2 or tuple(mask.shape[-2:]) != (n_q, n_k):
        return []
    row = torch.arange(n_q)[:, None] + (n_k - n_q)   # queries end-aligned
    col = torch.arange(n_k)[None, :]
    right = col <= row                               # True: takes part
    # A float mask hides where it is -inf or as low as a masked score
    # (-1e9 written by hand hides as well as -inf).
    takes = (mask if mask.dtype == torch.bool else
             ~torch.isnan(mask) & (mask > MASKED)).reshape(-1, n_q, n_k)
    regions = {"on the diagonal (each query's own)": col == row,
               "below the diagonal (before the query)": col < row,
               "above the diagonal (after the query)": col > row}
    hides = [n for n, r in regions.items()
             if bool((r & right & ~takes).any())]
    shows = [n for n, r in regions.items()
             if bool((r & ~right & takes).any())]
    if not hides and not shows:
        return []
    wrong = " and ".join(
        ([f"hides the keys {' and '.join(hides)}"] if hides else []) +
        ([f"shows the keys {' and '.join(shows)}"] if shows else []))
    words = (f"Your {CALL} gets an `attn_mask` that {wrong}. With the "
             f"causal mask, a bool mask True on and below the diagonal "
             f"(True takes part), it gives the expected values.")
    return [("fused: causal mask", words,
             lambda: _replay(q, k, v, right, False, scale))]


def _scale_words(used: float, sizes: dict[str, int], head_name: str) -> str:
    named = name_number(used, sizes, prefer=head_name)
    return f"{_fmt(used)}" + (f" = {named}" if named else "")


# What a fused call returns: the context (weights @ v), never an earlier
# step (its q, k and v are its arguments, its scores and weights hidden).
RETURNS = "context"


def _as_called(call: FusedCall) -> torch.Tensor | None:
    if call.dropout_p > 0 or len(call.tensors) < 3:
        return None
    q, k, v = call.tensors[:3]
    return _replay(q, k, v, _mask(call), call.is_causal, call.scale)


def repoint(calls: list[FusedCall], divergence: Divergence,
            steps: dict[str, torch.Tensor]) -> bool:
    """A tensor a recorded call returned (replayed as called, it gives
    the divergence's values) compared with a step before the call's own
    (q, k or v: alike in shape only) is compared instead with the first
    step from the context on that it can be laid out as; True if it was
    (the comparison with the earlier step said nothing true)."""
    if STEPS[divergence.step].rank >= STEPS[RETURNS].rank:
        return False
    got = divergence.got
    if not any(made is not None and any(same(view, got) for view in
                                        layouts(made, tuple(got.shape)))
               for made in map(_as_called, calls)):
        return False
    for name, step in steps.items():
        if STEPS[name].rank < STEPS[RETURNS].rank:
            continue
        views = layouts(got, tuple(step.shape))
        if views:
            divergence.step, divergence.got = name, views[0]
            divergence.expected = step
            return True
    return False


def explain(calls: list[FusedCall], divergence: Divergence,
            steps: dict[str, torch.Tensor], head: int, head_name: str,
            sizes: dict[str, int]) -> Relation | None:
    """The fix that, applied to the recorded call that gives the student's
    values at ``divergence``, gives the reference's; or None."""
    got, expected = divergence.got, divergence.expected
    shape = tuple(expected.shape)
    for call in calls:
        as_called = _as_called(call)
        if as_called is None:
            continue
        q, k = call.tensors[:2]
        views = layouts(as_called, shape)
        at = next((i for i, view in enumerate(views) if same(view, got)),
                  None)
        if at is None:
            continue        # not the call that gave these values
        heads = steps["q"].shape[1] if "q" in steps and \
            steps["q"].dim() == 4 else 1
        for key, words, replay in _fixes(call, head, head_name, sizes,
                                         heads):
            fixed = replay()
            if fixed is None:
                continue
            fixed_views = layouts(fixed, shape)
            if at < len(fixed_views) and same(fixed_views[at], expected):
                if key == "fused: scaled twice":
                    words += _prescaled(q, k, steps, head)
                return Relation(key, words)
    return None


def _prescaled(q: torch.Tensor, k: torch.Tensor,
               steps: dict[str, torch.Tensor], head: int) -> str:
    """Which of the call's q and k is already divided by sqrt(head), as a
    fact shown by value ("" when neither is shown)."""
    root = math.sqrt(head)
    said = [name for name, t in (("q", q), ("k", k)) if name in steps
            and any(same(view, steps[name] / root)
                    for view in layouts(t, tuple(steps[name].shape)))]
    if not said:
        return ""
    return (f" ({' and '.join(f'the {n} it gets is' for n in said)} "
            f"already divided by sqrt({head}).)")
