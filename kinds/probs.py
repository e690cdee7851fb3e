"""The attention probabilities a module returns (``attention_probs``, the
attention homework's own kind): ``forward(x, return_attention=True)``
returns them as ``[batch * heads, queries, keys]``, equal to the frozen
``attention`` tensor.

A student's tensor with the same numbers in another layout is named only
when rearranging it gives the reference. The reference returns ``[batch
* heads, queries, keys]``; another order (heads-major ``(heads batch)``
folding, ``[batch, queries, heads, keys]``, keys as rows, ...) is one of
the 24 orders of those four axes, possibly with neighbours merged. Each
order whose merge gives the student's shape is tried: the reference
permuted to it must equal the student's values within the item's
tolerance, so the fix said (the student's tensor reshaped, permuted back
and flattened) is proven on the student's values.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from autograder import probes as P
from autograder.checks.base import CaseCheck, Context, Verdict
from autograder.checks.compare import close, fmt_shape, matching_mistakes
from autograder.checks.entries import Check
from autograder.checks.outputs import (diagnose, mistake_tensors,
                                       returned_tensors)
from autograder.checks.registry import register
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.values import Case

AXES = ("batch", "heads", "queries", "keys")


@dataclass(frozen=True)
class Layout:
    """A proven layout: the axes' order, how they are merged (each group
    a tuple of axis indices) and the fix as code."""

    order: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]
    fix: str

    @property
    def words(self) -> str:
        """The layout as ``[heads * batch, queries, keys]``."""
        return "[" + ", ".join(" * ".join(AXES[a] for a in group)
                               for group in self.groups) + "]"


def _groupings(sizes: tuple[int, ...], shape: tuple[int, ...]
               ) -> list[tuple[tuple[int, ...], ...]]:
    """Every way to merge neighbouring positions of ``sizes`` into
    ``shape`` (positions as indices into ``sizes``)."""
    if not shape:
        return [()] if not sizes else []
    found = []
    product, cuts = 1, []
    for cut in range(1, len(sizes) + 1):
        product *= sizes[cut - 1]
        if product > shape[0] and shape[0] > 0:
            break
        if product == shape[0]:
            cuts.append(cut)
    # Longest first: an axis of size 1 joins the group on its left
    # ([batch * heads, ...] for one head, not [batch, heads * keys, ...]).
    for cut in reversed(cuts):
        for rest in _groupings(sizes[cut:], shape[1:]):
            head = tuple(range(cut))
            found.append((head, *(tuple(i + cut for i in g)
                                  for g in rest)))
    return found


def _orders(sizes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every order of the four axes but the reference's, the fewest
    moves of the axes longer than 1 first (an axis of size 1 may sit
    anywhere: moving it says nothing)."""
    def moves(order: tuple[int, ...]) -> tuple[int, int]:
        inversions = [(a, b) for i, a in enumerate(order)
                      for b in order[i + 1:] if a > b]
        return (sum(sizes[a] > 1 and sizes[b] > 1 for a, b in inversions),
                len(inversions))
    found = [o for o in itertools.permutations(range(4))
             if o != (0, 1, 2, 3)]
    return sorted(found, key=moves)


def probs_layout(got: torch.Tensor, expected: torch.Tensor, heads: int,
                 atol: float, rtol: float) -> Layout | None:
    """The order of ``got``'s axes if ``got`` is ``expected`` (``[b*h, s,
    s]``) laid out another way, proven by value; None when no
    rearrangement gives it (or ``got`` is the reference's own order
    merely unflattened: the caller says that)."""
    if expected.dim() != 3 or heads < 1 or expected.shape[0] % heads or \
            got.numel() != expected.numel() or got.numel() == 0:
        return None
    b, s, t = expected.shape[0] // heads, expected.shape[1], expected.shape[2]
    full = expected.reshape(b, heads, s, t)
    sizes = (b, heads, s, t)
    shape = tuple(got.shape)
    if close(got.reshape(expected.shape), expected, atol, rtol):
        return None     # the reference's own order, merely reshaped
    for order in _orders(sizes):
        permuted = tuple(sizes[a] for a in order)
        for grouping in _groupings(permuted, shape):
            candidate = full.permute(order).reshape(shape)
            if not close(got, candidate, atol, rtol):
                continue
            groups = tuple(tuple(order[i] for i in g) for g in grouping)
            back = tuple(order.index(a) for a in range(4))
            fix = (f"`probs.reshape({', '.join(map(str, permuted))})"
                   f".permute({', '.join(map(str, back))})"
                   f".reshape({b * heads}, {s}, {t})`")
            return Layout(order, groups, fix)
    return None


def layout_words(found: Layout, shape: tuple[int, ...]) -> str:
    """The feedback: the student's layout, the item's, and the proven
    fix."""
    return (f"your probabilities hold the right values laid out as "
            f"{found.words} (shape [{', '.join(map(str, shape))}]); the "
            f"item wants [batch * heads, queries, keys] (the heads of one "
            f"batch element next to each other, each row one query's "
            f"weights over the keys): rearranged that way, "
            f"{found.fix}, your values equal the expected ones")


@register("item", "attention_probs", uses_cases=True,
          explains_crashes=True)
class AttentionProbs(CaseCheck):
    """The probabilities of ``forward(x, return_attention=True)``: shape
    exactly [b*h, s, s] and values equal to ``attention``."""

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """One call with return_attention=True."""
        return [P.case_probe(case, train=check.run_mode == "train",
                             kwargs={"return_attention": True})]

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Compare, with a structural diagnosis of a [b, h, s, s] answer."""
        outputs, problem = returned_tensors(results[0], probes[0], 2)
        if outputs is None:
            return Verdict(False, problem, "wrong return value")
        got, expected = outputs[1], case.tensors["attention"]
        mistakes = mistake_tensors(case, "attention")
        what = "`probs`"
        verdict = _layout(got, expected, mistakes, case, check, ctx) or \
            _reduced(got, expected, case, check)
        if verdict is not None:
            return verdict
        if tuple(got.shape) != tuple(expected.shape) and \
                got.numel() == expected.numel():
            flat = got.reshape(expected.shape)
            verdict = diagnose(flat, expected, mistakes, ctx, check, what)
            shape = (f"probabilities not flattened: they have shape "
                     f"{fmt_shape(got.shape)}, expected "
                     f"{fmt_shape(expected.shape)} = [batch_size * "
                     f"{case.argument('heads')}, seq_len, seq_len] "
                     f"(reshape them, keeping "
                     f"the heads of one batch element next to each other)")
            if verdict.ok:
                # The catalogue freezes this answer unflattened: name it.
                named = matching_mistakes(got, mistakes,
                                          list(ctx.mistake_messages),
                                          ctx.mistake_atol)
                return Verdict(False, shape + "; after that reshape the "
                               "values are right.", "not flattened to "
                               "[b*h, s, s]", named[0] if named else None,
                               named)
            return Verdict(False, f"{shape}; even after that reshape, "
                           f"{verdict.message}", "wrong shape and values",
                           verdict.mistake, verdict.candidates)
        return diagnose(got, expected, mistakes, ctx, check, what)


# How the heads of [b, heads, s, t] may be reduced to [b, s, t], each
# with its words.
REDUCTIONS = (
    (lambda t: t.mean(1), "averaged over the heads"),
    (lambda t: t.sum(1), "summed over the heads"),
    (lambda t: t.amax(1), "their maximum over the heads"),
    (lambda t: t[:, 0], "the first head's alone"),
    (lambda t: t[:, -1], "the last head's alone"),
)


def _reduced(got: torch.Tensor, expected: torch.Tensor, case: Case,
             check: Check) -> Verdict | None:
    """Probabilities of one [b, s, t] tensor where every head's belongs,
    named when a reduction of the expected heads gives them exactly."""
    x = case.tensors.get("x")
    if x is None or x.dim() == 0 or expected.dim() != 3 or \
            not x.shape[0] or expected.shape[0] % x.shape[0]:
        return None
    b, heads = x.shape[0], expected.shape[0] // x.shape[0]
    full = expected.reshape(b, heads, *expected.shape[1:])
    if heads < 2 or tuple(got.shape) != (b, *full.shape[2:]):
        return None
    for reduce, words in REDUCTIONS:
        if close(got, reduce(full), check.atol, check.rtol):
            return Verdict(False, (
                f"`probs` has shape {fmt_shape(got.shape)}, expected "
                f"{fmt_shape(expected.shape)} = [batch_size * "
                f"{case.argument('heads')}, seq_len, seq_len]: your "
                f"probabilities are the expected ones {words}. Return "
                f"every head's, each batch element's heads next to each "
                f"other."), "heads reduced to one")
    return None


def _layout(got: torch.Tensor, expected: torch.Tensor,
            mistakes: dict[str, torch.Tensor], case: Case, check: Check,
            ctx: Context) -> Verdict | None:
    """The probabilities' numbers in another layout than [b*h, s, s]
    (heads-major, queries and heads swapped, ...), named when the
    rearrangement of the student's own tensor gives the reference; None
    for a right answer, a catalogued mistake (its own message) or values
    no rearrangement explains."""
    # The heads per batch element from the case's own input: the first
    # dimension of the answer is its batch times the heads.
    x = case.tensors.get("x")
    if x is None or x.dim() == 0 or not x.shape[0] or \
            expected.dim() != 3 or expected.shape[0] % x.shape[0]:
        return None
    heads = expected.shape[0] // x.shape[0]
    if close(got, expected, check.atol, check.rtol) or \
            matching_mistakes(got, mistakes, list(ctx.mistake_messages),
                              ctx.mistake_atol):
        return None
    found = probs_layout(got, expected, heads, check.atol, check.rtol)
    if found is None:
        return None
    return Verdict(False, layout_words(found, tuple(got.shape)) + ".",
                   f"probabilities laid out as {found.words}",
                   cause=f"probabilities laid out as {found.words}")
