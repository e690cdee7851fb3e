"""Walk a student's recorded tensors, in execution order, along the
reference's named steps, and find where their values leave the path.

A recorded tensor is compared with a step in every layout a correct
solution may use (keys transposed, ``[b*h, s, s]`` or ``[b, h, s, s]``,
heads split or merged; scores and weights never transposed, which is
k @ q^T, not a layout); the recorder already made it float32. The first
tensor that is shaped like a step still ahead but matches none is where
the values leave the path, unless a later tensor rejoins it (a helper
tensor the reference has no name for, such as a hand-written softmax's
``exp``): then the walk goes on.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import torch

from autograder.checks.compare import row_factors
from autograder.checks.diagnosis.steps import ORIENTED, STEPS

MASKED = -1e4      # a score at or below this is a masked position
MEANT = 0.5        # agreement that shows which step a wrong line gives


@dataclass
class Divergence:
    """Where the values leave the path: the record's line, the step it
    should equal (both in the step's layout), and the last step matched
    before it (and its line)."""

    line: int
    step: str
    got: torch.Tensor
    expected: torch.Tensor
    last: str | None = None
    last_line: int | None = None
    relation: Any = None       # what explains the difference, if found
    # Which step the line was meant to give is not proven by its values
    # (steps ahead that no relation explains agree with them alike):
    # ``step`` is only the earliest of them, what the values are
    # compared with, not what the line is said to give.
    unnamed: bool = False
    # The line reads the last step matched, yet its values are those of
    # this earlier step, unchanged (``einsum("bhqk,bhqd->bhqd", w, v)``
    # gives v: the weights of each row sum to 1).
    same_as: str | None = None
    # What the values are compared with, when not ``step`` itself (the
    # step's record transposed, for a transpose written as a reshape).
    compared: str | None = None
    # The first line after the last step matched whose values no step
    # could be compared with, on a line run again and again (a loop's
    # pieces, an accumulator): the values may leave the path there, at
    # ``line`` or between; None when every line between was compared.
    since: int | None = None


# Steps a correct solution may hold with the heads not yet split
# (``[b, s, h*d]``). The context never: ``[b, s, h*d]`` is the merged
# step's own shape, so a tensor of that shape is the heads merged, and a
# wrong merge is named as one, never as a context "in another order".
UNSPLIT = ("q", "k", "v")


def oriented_layouts(t: torch.Tensor, shape: tuple[int, ...],
                     step: str = "") -> list[tuple[torch.Tensor, bool]]:
    """Views of ``t`` in ``shape`` (the shape of ``step``, if given) that
    a correct solution may hold, each with whether it swaps ``t``'s last
    two dimensions: as is, the last two dimensions swapped (keys
    transposed), heads flattened into the batch (``[b*h, s, d]``), heads
    not yet split (``[b, s, h*d]``: q, k and v only, or any step when
    ``step`` is not given) or split but not transposed
    (``[b, s, h, d]``)."""
    found: list[tuple[torch.Tensor, bool]] = []
    if t.numel() != math.prod(shape):
        return found

    def add(view: torch.Tensor, swapped: bool = False) -> None:
        if tuple(view.shape) == tuple(shape):
            found.append((view, swapped))

    add(t)
    if t.dim() >= 2:
        add(t.transpose(-2, -1), True)
    if len(shape) == 4:
        b, h, s, d = shape
        if t.dim() == 3 and t.shape[0] == b * h:
            add(t.reshape(b, h, *t.shape[1:]))
            add(t.reshape(b, h, *t.shape[1:]).transpose(-2, -1), True)
        if t.dim() == 3 and tuple(t.shape) == (b, s, h * d) and (
                not step or step in UNSPLIT):
            add(t.reshape(b, s, h, d).transpose(1, 2))
        if t.dim() == 4 and tuple(t.shape) == (b, s, h, d):
            add(t.transpose(1, 2))
    if len(shape) == 3 and t.dim() == 4 and t.shape[1] == 1:
        add(t.reshape(shape))                 # one head: [b, 1, s, d]
    return found


def layouts(t: torch.Tensor, shape: tuple[int, ...],
            step: str = "") -> list[torch.Tensor]:
    """The views of :func:`oriented_layouts`, without their flags."""
    return [view for view, _ in oriented_layouts(t, shape, step)]


def tolerance(expected: torch.Tensor) -> float:
    """How close a float32 computation of a step comes to the frozen one."""
    finite = expected[torch.isfinite(expected)]
    scale = float(finite.abs().max()) if finite.numel() else 1.0
    return 1e-5 * (1.0 + scale)


def same(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal within ``tolerance``; masked scores equal whatever very
    negative number fills them (``-inf``, ``-1e9``, ``finfo.min``)."""
    if got.shape != expected.shape or torch.isnan(got).any():
        return False
    low_e, low_g = expected <= MASKED, got <= MASKED
    if not torch.equal(low_e, low_g):
        return False
    keep = ~low_e
    return bool(((got - expected).abs()[keep] <= tolerance(expected)).all())


def agreement(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The fraction of positions where the two agree (how near a wrong
    tensor is to a step: which step it was meant to be)."""
    if got.shape != expected.shape:
        return 0.0
    both_low = (expected <= MASKED) & (got <= MASKED)
    near = ((got - expected).abs() <= tolerance(expected)) | both_low
    return float(near.float().mean())


def _alternatives(name: str, tensor: torch.Tensor,
                  head: int) -> list[torch.Tensor]:
    """Other values of a step on a correct path: q or k scaled before
    the product (by 1/sqrt(head) or its square root)."""
    if name in ("q", "k"):
        return [tensor, tensor / head ** 0.5, tensor / head ** 0.25]
    return [tensor]


# Score steps a softmax is taken of: a constant added to a row changes no
# weight (scores less their row's maximum, a log_softmax), so such a
# tensor is on the path.
SHIFTABLE = ("scores", "scaled", "masked", "scaled_masked")


def row_shifted(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether ``got`` is ``expected`` plus one constant per row (the
    last dimension), not all zero, on the positions neither masks (both
    mask the same ones)."""
    if got.shape != expected.shape or torch.isnan(got).any() or \
            not torch.equal(expected <= MASKED, got <= MASKED):
        return False
    keep = (expected > MASKED) & torch.isfinite(expected)
    if not bool((keep.sum(-1) >= 2).any()):
        return False    # one position a row: any value is a shift of it
    diff = torch.where(keep, got - expected, 0.0)
    count = keep.sum(-1, keepdim=True).clamp_min(1)
    shift = diff.sum(-1, keepdim=True) / count
    scale = tolerance(expected) + 1e-5 * float(shift.abs().max())
    return bool(shift.abs().max() > scale) and bool(
        ((diff - shift).abs()[keep] <= scale).all())


def matches(t: torch.Tensor, name: str, step: torch.Tensor,
            head: int) -> bool:
    """Whether the recorded ``t`` is step ``name`` in some layout: for a
    step whose last two dimensions are [query, key] (``ORIENTED``), only
    in a layout that keeps them in that order (its transpose is k @ q^T,
    another tensor, which a later softmax or mask treats differently);
    a score step also shifted by a constant per row (``SHIFTABLE``)."""
    return any(same(view, alt) or (name in SHIFTABLE and
                                   row_shifted(view, alt))
               for view, swapped in oriented_layouts(t, tuple(step.shape),
                                                     name)
               if not (swapped and name in ORIENTED)
               for alt in _alternatives(name, step, head))


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """|got - expected| / |expected| over the positions neither masks."""
    keep = (expected > MASKED) & (got > MASKED) & torch.isfinite(got) & \
        torch.isfinite(expected)
    if not keep.any():
        return math.inf
    norm = float(expected[keep].norm())
    return float((got - expected)[keep].norm()) / (norm or 1.0)


# v feeds only the steps after the weights: scores that match after a
# wrong v do not bring the values back on the path.
_NOT_FED_BY_V = ("scores", "scaled", "masked", "scaled_masked", "weights")


def _downstream(name: str, other: str) -> bool:
    if STEPS[other].rank <= STEPS[name].rank:
        return False
    return not (name == "v" and other in _NOT_FED_BY_V)


# (step, the tensor in one of its layouts, the step's frozen tensor,
# whether that layout swaps the tensor's last two dimensions)
Explain = Callable[[str, torch.Tensor, torch.Tensor, bool], Any]


# (line, earlier line): whether the statement on the first reads a name
# the statement on the second bound
Reads = Callable[[int, int], bool]


def _regressed(records: list[tuple[int, torch.Tensor]], i: int,
               hits: list[set[str]], last: str, last_line: int,
               steps: dict[str, torch.Tensor], reads: Reads | None
               ) -> Divergence | None:
    """Record ``i``, whose values are only an earlier step's, taken as
    where the values leave the path when its line reads the last step
    matched (a copy of q made after the weights reads no weights) and
    it is shaped like the step ahead, which no later record rejoins."""
    line, tensor = records[i]
    if reads is None or not reads(line, last_line):
        return None
    earlier = max(hits[i], key=lambda n: STEPS[n].rank)
    if not any(same(view, steps[earlier]) for view in layouts(
            tensor, tuple(steps[earlier].shape), earlier)):
        return None   # shifted per row (a log of the weights): not unchanged
    seen = set().union(*hits[:i])
    for name in steps:
        if name in seen or STEPS[name].rank <= STEPS[last].rank:
            continue
        views = [view for view, swapped in oriented_layouts(
                 tensor, tuple(steps[name].shape), name)
                 if not (swapped and name in ORIENTED)]
        if not views:
            continue
        # The step ahead holds these numbers too (one token: its weights
        # are 1 and the context is v): no departure.
        if any(same(view, steps[name]) for view in views) or any(
                name in h or any(_downstream(name, n) for n in h)
                for h in hits[i + 1:]):
            return None
        return Divergence(line, name, views[0], steps[name], last,
                          last_line, same_as=earlier)
    return None


def _meant(options: list[tuple[str, torch.Tensor, bool]],
           steps: dict[str, torch.Tensor], explain: Explain | None
           ) -> tuple[str, torch.Tensor, Any, bool]:
    """Which of ``options`` (step, view, swapped) a wrong tensor was meant
    to be: the step ``explain`` finds a relation for, nearest first; else
    the earliest of those it agrees with most, unnamed when several tie.
    (step, view, relation, unnamed)."""

    def nearness(option: tuple[str, torch.Tensor, bool]) -> tuple:
        # A tensor masks where a step does, or neither masks: scores
        # scaled on a line before the mask are the scaled scores, not
        # the masked ones with every masked position "different".
        view, step = option[1], steps[option[0]]
        return (bool((view <= MASKED).any()) == bool(
                    (step <= MASKED).any()),
                round(agreement(view, step), 2),
                -relative_error(view, step))

    explained = [(o, found) for o in options if explain is not None
                 for found in [explain(o[0], o[1], steps[o[0]], o[2])]
                 if found is not None]
    if explained:
        (name, view, _), relation = max(explained,
                                        key=lambda e: nearness(e[0]))
        return name, view, relation, False
    # Agreement alike (within its rounding) is no proof of which step the
    # line gives: the earliest of the steps tied is where the values
    # leave (a later one is computed from it), compared with, not named
    # (a closer relative error is no relation proven on the values).
    top = max(nearness(o)[:2] for o in options)
    tied = [o for o in options if nearness(o)[:2] == top]
    # Rows of probabilities are compared with the weights, not with the
    # scores an earlier step holds (what it is compared with, not named).
    tied = [o for o in tied if o[0] == "weights"] if any(
        o[0] == "weights" and _probabilities(o[1]) for o in tied) else tied
    name, view, _ = min(tied, key=lambda o: (
        STEPS[o[0]].rank, tuple(-x for x in nearness(o))))
    # One step alone shaped like the tensor proves nothing either (a
    # helper the reference has no name for, such as scores shifted by
    # their maximum): named only when most of its positions agree.
    return name, view, None, len({o[0] for o in tied}) > 1 or \
        top[1] < MEANT


def _probabilities(t: torch.Tensor) -> bool:
    """Whether every row (last dimension) of ``t`` is finite, not
    negative and sums to 1."""
    return t.numel() > 0 and bool(torch.isfinite(t).all()) and \
        bool((t >= 0).all()) and bool(((t.sum(-1) - 1).abs() <= 1e-4).all())


def _numerator(t: torch.Tensor, steps: dict[str, torch.Tensor]) -> bool:
    """Whether ``t`` is the weights times a positive factor per row (a
    hand-written softmax's ``exp`` before its division): on the path, a
    tensor the reference has no name for."""
    weights = steps.get("weights")
    if weights is None or t.numel() != weights.numel() or t.dim() < 2:
        return False
    for view in layouts(t, tuple(weights.shape), "weights"):
        if not bool(torch.isfinite(view).all()) or \
                bool(torch.equal(view, weights)):
            continue
        factor = row_factors(view, weights, weights > 0)
        # One factor for every row is the weights scaled (times 1 - p, a
        # bug to name); the sums of exp differ from row to row.
        if factor is not None and bool((factor > 0).all()) and \
                same(view, weights * factor) and \
                float(factor.max() - factor.min()) > 1e-4 * float(
                    factor.abs().max()):
            return True
    return False


def _divided_later(records: list[tuple[int, torch.Tensor]],
                   hits: list[set[str]], i: int,
                   steps: dict[str, torch.Tensor], reads: Reads | None
                   ) -> bool:
    """Whether record ``i`` is a hand-written softmax's exp, divided later
    on (a copy of the same numbers, dropout in eval mode, divides
    nothing), or read by a later line of its shape: that line divides
    it, rightly or not, and is where to look."""
    line, tensor = records[i]
    return _numerator(tensor, steps) and any(
        hits[j] or (_numerator(t, steps) or (
            reads is not None and t.shape == tensor.shape and
            later != line and reads(later, line))) and not (
            t.shape == tensor.shape and torch.equal(t, tensor))
        for j, (later, t) in enumerate(records[i + 1:], i + 1))


def walk(records: list[tuple[int, torch.Tensor]],
         steps: dict[str, torch.Tensor], head: int,
         explain: Explain | None = None,
         reads: Reads | None = None) -> Divergence | None:
    """The first place the recorded values leave the path of ``steps``
    (name -> frozen tensor, ``head`` the size each head's scores are
    scaled by), or None: the path is followed, or nothing is shaped like
    the step ahead, or a value was not kept (say nothing rather than
    guess). Which step a wrong tensor was meant to be: the first step
    ahead that ``explain`` (step, got, expected) finds a relation for,
    else the one it agrees with most, else the nearest. A tensor equal
    to an earlier step from a line that ``reads`` the last step matched
    leaves the path there too (``_regressed``)."""
    records, stacked = heads_stacked(records, steps)
    names = list(steps)
    hits = [_proven({n for n in names if t.numel() and
                     matches(t, n, steps[n], head)}, steps)
            for _, t in records]
    runs = Counter(line for line, _ in records)
    last: str | None = None
    last_line: int | None = None
    since: int | None = None    # (Divergence.since)
    for i, (line, tensor) in enumerate(records):
        if tensor.numel() == 0:
            return None     # a value the recorder could not keep: unknown
        if not bool(tensor.any()):
            # Zeros (baddbmm's input, an accumulator before its loop):
            # made from no input, no step of the path's.
            continue
        if not hits[i] and _divided_later(records, hits, i, steps, reads):
            continue
        if hits[i]:
            best = max(hits[i], key=lambda n: STEPS[n].rank)
            if last is None or STEPS[best].rank >= STEPS[last].rank:
                last, last_line, since = best, line, None
            elif last_line is not None and i not in stacked and (
                    back := _regressed(records, i, hits, last, last_line,
                                       steps, reads)) is not None:
                return back
            continue
        if runs[line] > 1 and reads is not None and reads(line, line):
            # An accumulator in a loop (``acc = acc + p * v_j``): a
            # partial sum is no step, nor, rescaled or divided after the
            # loop, its last value.
            since = since or line
            continue
        floor = STEPS[last].rank if last else 0
        seen = set().union(*hits[:i]) if i else set()
        # A loop's heads stacked come after steps their own loop passed
        # (one head's weights before the next head's values): any step.
        ahead = [n for n in names if n != "x" and (i in stacked or (
                 n not in seen and STEPS[n].rank >= floor))]
        # A view that swaps a [query, key] step's last two dimensions is
        # another tensor, not that step in another layout: no relation
        # read in it is proven on the student's values.
        options = [(n, view, swapped) for n in ahead
                   for view, swapped in oriented_layouts(
                       tensor, tuple(steps[n].shape), n)
                   if not (swapped and n in ORIENTED)]
        if not options:
            if runs[line] > 1:   # a loop's piece (one row, one key)
                since = since or line
            continue

        name, view, relation, unnamed = _meant(options, steps, explain)
        if any(name in h or any(_downstream(name, n) for n in h)
               for h in hits[i + 1:]):
            continue     # a helper the reference has no name for
        return Divergence(line, name, view, steps[name], last, last_line,
                          relation, unnamed,
                          since=since if since is not None and since < line
                          else None)
    return None


def heads_stacked(records: list[tuple[int, torch.Tensor]],
                  steps: dict[str, torch.Tensor]
                  ) -> tuple[list[tuple[int, torch.Tensor]], set[int]]:
    """``records`` with, after every ``heads``-th run of a line that
    binds one head's piece of a step (``[b, s, d]`` of a ``[b, heads, s,
    d]`` step: a loop over the heads), the pieces of those runs stacked
    as that step (``[b, heads, s, d]``), so that the loop's tensors are
    compared with the heads of the step: a wrong slice is found on its
    own line, not at the merge after it. Likewise after every ``b``-th
    run of a line that binds one batch element's piece (``[s, d]`` of a
    ``[b, s, d]`` step: a loop over the batch), stacked on dimension 0.
    Also the indices of the stacked records."""
    pieces: dict[tuple[int, ...], tuple[int, int]] = {}
    for t in steps.values():
        shape = tuple(t.shape)
        if len(shape) >= 3 and shape[0] > 1:
            pieces.setdefault(shape[1:], (shape[0], 0))
    heads = {shape[1] for shape in (tuple(t.shape) for t in steps.values())
             if len(shape) == 4}
    if len(heads) == 1 and (count := heads.pop()) > 1:
        # A head's piece wins over a batch element's of the same shape.
        pieces.update({(b, s, d): (count, 1) for b, _, s, d in (
            tuple(t.shape) for t in steps.values() if t.dim() == 4)})
    runs: dict[int, list[torch.Tensor]] = {}
    found, stacked = [], set()
    for line, tensor in records:
        found.append((line, tensor))
        piece = pieces.get(tuple(tensor.shape))
        if piece is None:
            continue
        run = runs.setdefault(line, [])
        if run and run[0].shape != tensor.shape:
            run.clear()
        run.append(tensor)
        if len(run) == piece[0]:
            stacked.add(len(found))
            found.append((line, torch.stack(run, dim=piece[1])))
            run.clear()
    return found, stacked


def _proven(hit: set[str], steps: dict[str, torch.Tensor]) -> set[str]:
    """The steps of ``hit`` (those a tensor matches) that its values
    prove: one whose frozen tensor equals that of an earlier step it also
    matches is dropped (with head_dim 1 the scaled scores are the scores:
    scaling there is the identity, and a match proves no scaling done,
    so the scaled step stays ahead, where a wrong scale is then found)."""
    return {n for n in hit if not any(
        STEPS[m].rank < STEPS[n].rank and same(steps[n], steps[m])
        for m in hit)}
