"""Name a simple relation between what a step should be and what the
student's code gave there: rounding to a lower precision, the region a
mask covers, a softmax over another axis or at another temperature, a
constant factor (named by the size whose square root, or inverse, it
is), a missing bias, the same numbers in another order. Each test states
a fact it checked on every position; none holds: no relation is named.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from autograder.checks.compare import row_factors
from autograder.checks.diagnosis.flow import MASKED, matches, same, tolerance
from autograder.checks.diagnosis.steps import ORIENTED, STEPS
from autograder.values import Case

SCALED = ("scaled", "scaled_masked")
RAW = {"scores": "scaled", "masked": "scaled_masked"}   # before scaling
MASKS = ("masked", "scaled_masked", "weights")
ROLES = ("q", "k", "v")


@dataclass(frozen=True)
class Relation:
    """A relation found: ``key`` groups a class's failures (no values),
    ``text`` tells the student (sizes and values of the case)."""

    key: str
    text: str
    # The step the student's line computes, when the relation shows it is
    # another than the one compared (a scores line that also scales).
    step: str | None = None
    # The same fact without the size it names (``divided by 3``, not
    # ``divided by 3 = seq_len``): said instead when another failing case
    # of the item does not show the same size (``attach.agree``).
    plain: "Relation | None" = None
    # Where several sizes fit the case's number (6 = context_length and
    # seq_len), the fact naming each alone: the one every failing case
    # shows is said (``attach.agree``).
    options: tuple[tuple[str, "Relation"], ...] = ()


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def name_number(value: float, sizes: dict[str, int], values: bool = True,
                prefer: str = "") -> str | None:
    """``value`` as a size, its square root or their inverses
    (``sqrt(d_in = 7)``; without ``values``: ``sqrt(d_in)``), else as a
    square root's own root (a scale rooted twice): the form of ``prefer``
    if it is one, else one or two forms, else None (three or more sizes
    fit: no guess)."""
    found: dict[str, str] = {}
    for forms in (_ROOTS, _FOURTH_ROOTS):   # the plain forms first
        for name, n in sizes.items():
            if n < 2:
                continue
            shown = f"{name} = {n}" if values else name
            for power, form in forms:
                number = float(n) ** power
                if abs(value - number) <= 1e-3 * abs(number):
                    found.setdefault(name, form.format(shown))
        if found:
            break
    if prefer in found:
        return found[prefer]
    if not found or len(found) > 2:
        return None
    return " or ".join(found.values())


_ROOTS = ((0.5, "sqrt({})"), (1.0, "{}"), (-0.5, "1/sqrt({})"),
          (-1.0, "1/({})"))
_FOURTH_ROOTS = ((0.25, "sqrt(sqrt({}))"), (-0.25, "1/sqrt(sqrt({}))"))


def _pattern(t: torch.Tensor, weights: bool) -> torch.Tensor | None:
    """The [s, s] positions masked in every matrix of ``t`` (zero weights,
    or very negative scores), or None if the matrices disagree."""
    low = (t == 0) if weights else (t <= MASKED)
    flat = low.reshape(-1, *low.shape[-2:])
    if not bool((flat == flat[0]).all()):
        return None
    return flat[0]


def _region(pattern: torch.Tensor) -> str:
    s = pattern.shape[-1]
    if not pattern.any():
        return "hides no position"
    ones = torch.ones(s, s, dtype=torch.bool)
    for k in range(-s + 1, s):
        if torch.equal(pattern, ones.triu(k)):
            return (f"hides key j for query i where j >= i + {k}" if k > 0
                    else f"hides key j for query i where j >= i - {-k}"
                    if k < 0 else "hides key j for query i where j >= i "
                    "(each token's own position too)")
        if torch.equal(pattern, ones.tril(k)):
            return (f"hides key j for query i where j <= i{k:+d}" if k else
                    "hides key j for query i where j <= i") + \
                " (the mask reversed: the past hidden, not the future)"
    return f"hides {int(pattern.sum())} of the {s * s} positions"


def _corner(want: torch.Tensor, have: torch.Tensor,
            sizes: dict[str, int]) -> list[tuple[str, str, str]]:
    """The student's mask ``have`` as a cut of a larger mask whose top-left
    corner is the expected ``want`` (a buffer built for the longest input,
    cut at the wrong corner): the same diagonal rule (``triu(k)``) at a size
    the case names, cut elsewhere, gives ``have``, and cut at ``[:s, :s]``
    gives ``want``. (size name, key, words) of each size such a cut fits
    (a shifted diagonal is such a cut of a mask one size larger: the size
    is said only where every failing case shows it, ``attach.agree``)."""
    s = want.shape[-1]
    if bool(have.all()):
        # Every position hidden: any larger mask's corner far enough from
        # its diagonal fits, so no size, corner or buffer is proven.
        return []
    rule = next((k for k in range(-s + 1, s) if torch.equal(
        want, torch.ones(s, s, dtype=torch.bool).triu(k))), None)
    if rule is None:
        return []
    found = []
    for name, n in sizes.items():
        if n <= s:
            continue
        full = torch.ones(n, n, dtype=torch.bool).triu(rule)
        # The two wrong corners only: any other cut is a shifted
        # diagonal, which the region's words already say.
        cuts = [(0, n - s, f"its last {s} columns (`[:{s}, -{s}:]`, the "
                 f"top-right corner)"),
                (n - s, 0, f"its last {s} rows (`[-{s}:, :{s}]`, the "
                 f"bottom-left corner)")]
        for r, c, words in cuts:
            if torch.equal(full[r:r + s, c:c + s], have):
                found.append((name, f"mask cut: [{r}:, {c}:] of {name}",
                              f"Your mask {_region(have)}: that is the {n} "
                              f"x {n} mask ({name} = {n}) cut at {words}; "
                              f"its top-left corner (`[:{s}, :{s}]`, the "
                              f"first {s} rows and columns) is the causal "
                              f"mask this input needs."))
    return found


def mask_region(step: str, got: torch.Tensor, expected: torch.Tensor,
                scaled: torch.Tensor | None = None,
                sizes: dict[str, int] | None = None) -> Relation | None:
    """A mask that covers another region than j > i: the scores the mask
    leaves are the right ones, or (weights) the softmax of the scaled
    scores (``scaled``) with that region hidden gives the student's
    weights. Named as a larger mask cut at the wrong place when that cut
    of it is the student's mask and its top-left corner the expected one
    (``_corner``, ``sizes``: the case's named sizes)."""
    if step not in MASKS:
        return None
    weights = step == "weights"
    want, have = _pattern(expected, weights), _pattern(got, weights)
    if want is None or not want.any():
        return None
    if have is None:
        return None
    if not weights:
        # The scores the mask leaves to both must be the right ones.
        both = (expected > MASKED) & (got > MASKED)
        if not bool(((got - expected).abs()[both] <=
                     tolerance(expected)).all()):
            return None
    elif not have.any() or scaled is None or not same(
            got, torch.softmax(scaled.masked_fill(have, float("-inf")), -1)):
        return None
    if not torch.equal(want, have):
        region = Relation(f"mask region: {_region(have)}",
                          f"Your mask {_region(have)}{_rows(want, have)}; "
                          f"the causal mask hides key j for query i where "
                          f"j > i (j >= i + 1): `triu(diagonal=1)` of a "
                          f"matrix of ones.")
        cuts = [(name, Relation(key, text, plain=region))
                for name, key, text in _corner(want, have, sizes or {})]
        if cuts:
            return replace(cuts[0][1], options=tuple(cuts))
        return region
    return None


MAX_ROWS = 3     # queries whose mask row is named one by one


def _keys(found: torch.Tensor) -> str:
    keys = [int(j) for j in found.nonzero().flatten()]
    return (f"key {keys[0]}" if len(keys) == 1 else
            f"keys {keys[0]} to {keys[-1]}"
            if keys == list(range(keys[0], keys[-1] + 1)) else
            "keys " + ", ".join(map(str, keys)))


def _rows(want: torch.Tensor, have: torch.Tensor) -> str:
    """Where a mask that follows no diagonal rule differs from the
    expected one, when only a few queries' rows do: what each of them
    shows or hides wrongly, the other rows being right."""
    rows = [i for i in range(want.shape[0])
            if not torch.equal(want[i], have[i])]
    if not rows or len(rows) > MAX_ROWS:
        return ""
    said = []
    for i in rows:
        shown, hidden = want[i] & ~have[i], have[i] & ~want[i]
        parts = ([f"shows {_keys(shown)}, which come after it"] if shown.any()
                 else []) + ([f"hides {_keys(hidden)}"] if hidden.any()
                             else [])
        said.append(f"query {i} " + " and ".join(parts))
    rest = " (every other query's row is right)" if len(rows) < \
        want.shape[0] else ""
    return ": " + "; ".join(said) + rest


def mask_fill(step: str, got: torch.Tensor, expected: torch.Tensor
              ) -> Relation | None:
    """Masked scores filled with a finite number (0, or one softmax does
    not take to 0) while the rest is right."""
    if step not in ("masked", "scaled_masked"):
        return None
    low = expected <= MASKED
    if not low.any() or bool((got <= MASKED).any()):
        return None
    rest = (got - expected).abs()[~low]
    if not bool((rest <= tolerance(expected)).all()):
        return None
    fills = got[low].unique()
    fill = _fmt(float(fills[0])) if fills.numel() == 1 else "other numbers"
    return Relation("mask fill: masked positions not -inf",
                    f"The masked positions hold {fill} instead of -inf: "
                    f"softmax still gives them weight. Fill them with "
                    f"`float('-inf')`.")


def precision(step: str, got: torch.Tensor, expected: torch.Tensor
              ) -> Relation | None:
    """Values rounded to float16 or bfloat16 (and otherwise right)."""
    finite = torch.isfinite(got) & torch.isfinite(expected)
    if not finite.any():
        return None
    g, e = got[finite], expected[finite]
    # The error each value may have, relative to its own size and the
    # values' mean size (a sum's rounding): an absolute bound would call
    # zeros "rounded" wherever the expected values are small.
    size = e.abs() + e.abs().mean()
    for dtype, words, digits in ((torch.float16, "float16", 3),
                                 (torch.bfloat16, "bfloat16", 2)):
        eps = torch.finfo(dtype).eps
        if torch.equal(g.to(dtype).float(), g) and bool(
                ((g - e).abs() <= 16 * eps * size).all()):
            return Relation(f"precision: rounded to {words}",
                            f"Your values are the expected ones rounded to "
                            f"{words} (about {digits} significant "
                            f"digits): compute in float32, "
                            f"as the input.")
    return None


def softmax_axis(step: str, got: torch.Tensor, before: torch.Tensor | None
                 ) -> Relation | None:
    """The weights are a softmax of the right scores over another axis."""
    if step != "weights" or before is None:
        return None
    names = (["the batch", "the heads", "the queries"] if got.dim() == 4
             else ["the batch", "the queries"])
    for dim, words in enumerate(names):
        other = torch.softmax(before, dim=dim)
        both = torch.isfinite(other) & torch.isfinite(got)
        if both.any() and torch.equal(torch.isfinite(other),
                                      torch.isfinite(got)) and bool(
                ((other - got).abs()[both] <= 1e-4).all()):
            return Relation(f"softmax over {words}",
                            f"Your weights are a softmax over {words}: "
                            f"they sum to 1 along that axis. The softmax "
                            f"runs over the keys, the last dimension "
                            f"(`dim=-1`): each query's row sums to 1.")
    return None


def _divisor_words(divisor: float, sizes: dict[str, int], prefer: str
                   ) -> tuple[str, str, str, str]:
    """How the scores were scaled: (key without values, words, and the
    same two without a size's name). A factor no size (or more than two)
    gives is said as a number only: both pairs alike."""
    if abs(divisor - 1.0) < 1e-3:
        return ("not divided", "not divided at all", "not divided",
                "not divided at all")
    if divisor < 1:
        times = 1.0 / divisor
        plain = ("multiplied by another number",
                 f"multiplied by {_fmt(times)} instead of divided")
        named = name_number(times, sizes, prefer=prefer)
        if named is None:
            return (*plain, *plain)
        short = name_number(times, sizes, False, prefer)
        return (f"multiplied by {short}",
                f"multiplied by {_fmt(times)} = {named} instead of divided",
                *plain)
    plain = ("divided by another number", f"divided by {_fmt(divisor)}")
    named = name_number(divisor, sizes, prefer=prefer)
    if named is None:
        return (*plain, *plain)
    return (f"divided by {name_number(divisor, sizes, False, prefer)}",
            f"divided by {_fmt(divisor)} = {named}", *plain)


def _named_or_plain(words: tuple[str, str, str, str], text: Any,
                    step: str | None = None) -> Relation:
    """The scale relation in ``words``' named form, carrying its plain
    form (``text`` makes a sentence of the words)."""
    plain = Relation(f"scale: scores {words[2]}", text(words[3]), step)
    if words[:2] == words[2:]:
        return plain
    return Relation(f"scale: scores {words[0]}", text(words[1]), step,
                    plain)


def temperature(step: str, got: torch.Tensor, expected: torch.Tensor,
                raw: torch.Tensor | None, head: int, head_name: str,
                sizes: dict[str, int]) -> Relation | None:
    """The weights are a softmax of the raw scores divided by another
    number than sqrt(head size)."""
    if step != "weights" or raw is None:
        return None
    keep = (got > 0) & (expected > 0)
    if not torch.equal(keep, expected > 0):
        return None
    logs = torch.where(keep, got.clamp_min(1e-30).log(), 0.0)
    raws = torch.where(keep, raw, 0.0)
    count = keep.sum(-1, keepdim=True).clamp_min(1)
    lc = torch.where(keep, logs - logs.sum(-1, keepdim=True) / count, 0.0)
    rc = torch.where(keep, raws - raws.sum(-1, keepdim=True) / count, 0.0)
    denominator = float((rc * rc).sum())
    if denominator == 0:
        return None
    t = float((lc * rc).sum()) / denominator
    if not bool(((lc - t * rc).abs() <= 1e-3 * (1 + lc.abs().max())).all()) \
            or t <= 0:
        return None
    divisor = 1.0 / t
    if abs(divisor - head ** 0.5) <= 1e-3 * head ** 0.5:
        return None
    words = _divisor_words(divisor, sizes, head_name)
    return _named_or_plain(words, lambda said: (
        f"Your weights are the softmax of the scores {said}; the scores "
        f"are divided by sqrt({head_name} = {head}) = "
        f"{_fmt(head ** 0.5)}."))


def factor(step: str, got: torch.Tensor, expected: torch.Tensor,
           head: int, head_name: str, sizes: dict[str, int]
           ) -> Relation | None:
    """``got`` is ``expected`` times one constant everywhere."""
    keep = torch.isfinite(expected) & (expected > MASKED)
    g, e = got[keep], expected[keep]
    norm = float((e * e).sum())
    if norm == 0 or not torch.isfinite(g).all():
        return None
    c = float((g.double() * e.double()).sum()) / norm
    # All zeros is no factor (and no divisor): say only where; nor is a
    # product past float range (a fill of finfo.max).
    if not math.isfinite(c) or c == 0 or abs(c - 1) < 1e-4 or not bool(
            ((g - c * e).abs() <= tolerance(expected) * max(1, abs(c))).all()):
        return None
    if step in SCALED or step in RAW:
        # Relative to the raw scores: a scores line that scales too.
        divisor = (head ** 0.5 if step in SCALED else 1.0) / c
        words = _divisor_words(divisor, sizes, head_name)
        if words[0] == "not divided" and step in RAW:
            return None
        return _named_or_plain(words, lambda said: (
            f"Your scaled scores are the scores {said}; expected divided "
            f"by sqrt({head_name} = {head}) = {_fmt(head ** 0.5)}."),
            RAW.get(step))
    return _sized("factor", c, sizes, lambda by: (
        f"Your values are the expected ones times {by}."))


def _sized(key: str, number: float, sizes: dict[str, int],
           text: Callable[[str], str]) -> Relation:
    """The relation whose ``text`` says ``number`` (``by``: the number,
    then the sizes it equals, if any): keyed by those sizes' names, its
    plain form without them, and one form per size that fits alone
    (``attach.agree`` keeps the size every failing case shows)."""
    said = _fmt(number)
    plain = Relation(f"{key} constant", text(said))
    options = tuple(
        (name, Relation(f"{key} {name_number(number, {name: n}, False)}",
                        text(f"{said} = {one}"), plain=plain))
        for name, n in sizes.items()
        for one in [name_number(number, {name: n})] if one is not None)
    named = name_number(number, sizes)
    if named is None:
        return replace(plain, options=options)
    return Relation(f"{key} {name_number(number, sizes, False)}",
                    text(f"{said} = {named}"), plain=plain, options=options)


def bias(step: str, got: torch.Tensor, expected: torch.Tensor,
         weights: dict[str, torch.Tensor], layers: dict[str, str]
         ) -> Relation | None:
    """``got`` differs from ``expected`` by one vector at every position:
    a bias left out (or added twice) of the layer computing ``step``
    (``layers``: the case's step -> layer attribute)."""
    if not (torch.isfinite(got).all() and torch.isfinite(expected).all()):
        return None
    diff = got - expected
    dims = (0, 2) if diff.dim() == 4 else tuple(range(diff.dim() - 1))
    mean = diff.mean(dim=dims, keepdim=True)
    tol = tolerance(expected)
    if float(mean.abs().max()) <= tol or \
            not bool(((diff - mean).abs() <= tol).all()):
        return None
    attribute = layers.get(step)
    b = weights.get(f"{attribute}.bias") if attribute else None
    if b is not None and b.numel() == mean.numel():
        b = b.reshape(mean.shape)
        layer = f"self.{attribute}"
        if bool(((mean + b).abs() <= tol).all()):
            return Relation(f"bias missing: {layer}",
                            f"Your {step} is the expected one minus the "
                            f"bias of `{layer}` at every position: the bias "
                            f"is left out (`x @ {layer}.weight.T` without "
                            f"`+ {layer}.bias`?). Call the layer: "
                            f"`{layer}(x)`.")
        if bool(((mean - b).abs() <= tol).all()):
            return Relation(f"bias added twice: {layer}",
                            f"Your {step} is the expected one plus the "
                            f"bias of `{layer}` once more: the bias is "
                            f"added twice.")
        other = _other_bias(mean, b, weights, layers, tol)
        if other:
            return Relation(
                f"bias of another layer: {layer}",
                f"Your {step} carries the bias of `self.{other}` where "
                f"`{layer}`'s belongs: it is the expected one minus "
                f"`{layer}.bias` plus `self.{other}.bias` at every "
                f"position. Give each projection its own bias.")
    elif b is None:
        # No layer of its own (the weighted sum): one of the layers' bias
        # once more or once less (rows of weights summing to 1 carry v's
        # bias through unchanged).
        for name, other in _biases(weights, layers, mean):
            if bool(((mean - other).abs() <= tol).all()):
                return Relation(
                    f"bias added twice: self.{name}",
                    f"Your {step} is the expected one plus the bias of "
                    f"`self.{name}` at every position: that bias is added "
                    f"once more than the layer itself adds it.")
            if bool(((mean + other).abs() <= tol).all()):
                return Relation(
                    f"bias missing: self.{name}",
                    f"Your {step} is the expected one minus the bias of "
                    f"`self.{name}` at every position: that bias is left "
                    f"out. Call the layer: `self.{name}(x)`.")
    positions = 1
    for d in dims:
        positions *= diff.shape[d]
    if positions < 2:   # one position: "the same at every one" says nothing
        return None
    return Relation("constant shift",
                    "Your values differ from the expected ones by the same "
                    "vector at every position.")


def _biases(weights: dict[str, torch.Tensor], layers: dict[str, str],
            like: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Each layer's bias (of the case's step layers) shaped as ``like``."""
    found = []
    for name in sorted(set(layers.values())):
        b = weights.get(f"{name}.bias")
        if b is not None and b.numel() == like.numel():
            found.append((name, b.reshape(like.shape)))
    return found


def input_scaled(step: str, got: torch.Tensor, expected: torch.Tensor,
                 weights: dict[str, torch.Tensor], layers: dict[str, str],
                 sizes: dict[str, int]) -> Relation | None:
    """``got`` is the layer computing ``step`` on its input times a
    constant, its bias added unscaled (``self.q(x / scale)``)."""
    attribute = layers.get(step)
    b = weights.get(f"{attribute}.bias") if attribute else None
    if b is None or not (torch.isfinite(got).all() and
                         torch.isfinite(expected).all()):
        return None
    # [b, heads, s, d]: the bias split by heads; else on the last dim
    shape = (1, expected.shape[1], 1, expected.shape[3]) \
        if expected.dim() == 4 else \
        (1,) * (expected.dim() - 1) + (expected.shape[-1],)
    if b.numel() != math.prod(shape):
        return None
    bias_ = b.reshape(shape)
    if got.numel() < 2 * b.numel():
        return None     # one position: two vectors of one element fit
    g, e = (got - bias_).double(), (expected - bias_).double()
    norm = float((e * e).sum())
    if norm == 0 or float(bias_.abs().max()) <= tolerance(expected):
        return None
    c = float((g * e).sum()) / norm
    if not math.isfinite(c) or c <= 0 or abs(c - 1) < 1e-4 or not bool(
            ((g - c * e).abs() <= tolerance(expected) * max(1, abs(c))).all()):
        return None
    layer = f"self.{attribute}"
    return _sized(f"input scaled: {layer}", 1 / c, sizes, lambda by: (
        f"Your {step} is `{layer}`'s output with its input divided by "
        f"{by}, its bias added as it is: a factor on the layer's input "
        f"scales the weights' part only. Scale after the layer (the "
        f"scores), not its input."))


def _other_bias(shift: torch.Tensor, own: torch.Tensor,
                weights: dict[str, torch.Tensor], layers: dict[str, str],
                tol: float) -> str:
    """The one other layer of ``layers`` whose bias, in place of
    ``own``, gives ``shift`` (a bias taken from the wrong projection),
    else ""."""
    fits = [attribute for attribute, b in _biases(weights, layers, own)
            if not torch.equal(b, own) and
            bool(((shift - (b - own)).abs() <= tol).all())]
    return fits[0] if len(fits) == 1 else ""


# The step a layer's input is, for each step a layer computes.
_LAYER_INPUT = {"q": ("x",), "k": ("x",), "v": ("x",),
                "output": ("merged", "context")}


def transposed_weight(step: str, got: torch.Tensor, expected: torch.Tensor,
                      steps: dict[str, torch.Tensor],
                      weights: dict[str, torch.Tensor],
                      layers: dict[str, str]) -> Relation | None:
    """The layer computing ``step`` applied with its weight not transposed
    (``x @ W + b``, where ``nn.Linear`` computes ``x @ W.T + b``): proven
    when the layer's input step times ``W.T`` (plus the bias) is the
    expected step and times ``W`` is the student's, in one layout."""
    from autograder.checks.diagnosis.flow import oriented_layouts
    attribute = layers.get(step)
    w = weights.get(f"{attribute}.weight") if attribute else None
    source = next((steps[n] for n in _LAYER_INPUT.get(step, ())
                   if n in steps), None)
    if w is None or source is None or w.dim() != 2 or \
            w.shape[0] != w.shape[1] or source.shape[-1] != w.shape[0]:
        return None
    b = weights.get(f"{attribute}.bias")
    shift = 0.0 if b is None else b.float()
    right = source.float() @ w.float().T + shift
    wrong = source.float() @ w.float() + shift
    shape = tuple(expected.shape)
    for (good, _), (bad, _) in zip(oriented_layouts(right, shape, step),
                                   oriented_layouts(wrong, shape, step)):
        if same(good, expected) and same(got, bad):
            layer = f"self.{attribute}"
            plus = "" if b is None else f" + {layer}.bias"
            given = next(n for n in _LAYER_INPUT[step] if n in steps)
            added = "" if b is None else f" plus `{layer}.bias`"
            return Relation(f"weight not transposed: {layer}",
                            f"These values ({_words(step)}) are "
                            f"{_words(given)} times `{layer}.weight`"
                            f"{added}: the weight is not transposed; "
                            f"`nn.Linear` computes `input @ "
                            f"{layer}.weight.T{plus}`. Call the layer "
                            f"(`{layer}(...)`) or use `{layer}.weight.T`.")
    return None


def _rearrangements(step: str, expected: torch.Tensor,
                    steps: dict[str, torch.Tensor]
                    ) -> list[tuple[torch.Tensor, str]]:
    """The step's numbers in the orders a mixed-up split or merge of the
    heads gives, each with what does it."""
    found = []
    if step in ("q", "k", "v", "context") and expected.dim() == 4:
        b, h, s, d = expected.shape
        joined = expected.transpose(1, 2).reshape(b, s, h * d)
        found.append((joined.reshape(b, h, s, d),
                      "the heads are split by a bare view/reshape to [b, "
                      "heads, seq, head_size], which mixes positions into "
                      "heads: view as [b, seq, heads, head_size], then "
                      "transpose(1, 2)"))
    context = steps.get("context")
    if step == "merged" and context is not None and context.dim() == 4:
        b, h, s, d = context.shape
        found.append((context.reshape(b, s, h * d),
                      "the heads are merged by a reshape without the "
                      "transpose back: transpose(1, 2) to [b, seq, heads, "
                      "head_size] first, then reshape"))
        found.append((context.permute(0, 2, 3, 1).reshape(b, s, h * d),
                      "the heads are merged head-minor (feature i of every "
                      "head side by side): transpose(1, 2), then reshape"))
        if b == h:
            found.append((context.permute(1, 2, 0, 3).reshape(h, s, b * d),
                          "the batch and the heads are exchanged, block i "
                          "of features holding batch element i where head "
                          "i belongs (a [batch, heads, ...] tensor read as "
                          "[heads, batch, ...], or indexed `t[i]`, batch "
                          "element i, where `t[:, i]` is head i)"))
    return found


def permutation(step: str, got: torch.Tensor, expected: torch.Tensor,
                steps: dict[str, torch.Tensor] | None = None
                ) -> Relation | None:
    """The expected numbers in another order: named as heads mixed only
    when a mixed-up split or merge rebuilds the student's values, else
    only the fact that the numbers are the same."""
    if step not in ("q", "k", "v", "context", "merged"):
        return None
    for candidate, words in _rearrangements(step, expected, steps or {}):
        if candidate.shape == got.shape and same(got, candidate):
            return Relation("heads mixed: reshape/transpose order",
                            f"Your tensor holds the expected numbers in "
                            f"another order: {words}.")
    g, _ = got.flatten().sort()
    e, _ = expected.flatten().sort()
    if not bool(((g - e).abs() <= tolerance(expected)).all()):
        return None
    return Relation("numbers in another order",
                    "Your tensor holds the expected numbers, in another "
                    "order.")


def _context_step(steps: dict[str, torch.Tensor]) -> str | None:
    """The step that is ``weights @ v``: the context, or the output of a
    class whose output is the context (no heads to merge)."""
    if "context" in steps:
        return "context"
    return "output" if "merged" not in steps else None


def chain(step: str, scores: torch.Tensor, steps: dict[str, torch.Tensor],
          head: int, values: torch.Tensor | None = None,
          mask: bool = True) -> torch.Tensor | None:
    """What the reference's own operations after the scores (scale by
    sqrt(head), its mask, softmax over the keys, times ``values``, by
    default v) make of ``scores`` at ``step``; None past the context."""
    low = next((steps[m] <= MASKED for m in ("masked", "scaled_masked")
                if m in steps), None) if mask else None
    scaled = scores / head ** 0.5
    if step == "scores":
        return scores
    if step == "scaled":
        return scaled
    if step in ("masked", "scaled_masked"):
        if low is None:
            return None
        return (scores if step == "masked" else scaled).masked_fill(
            low, float("-inf"))
    weights = torch.softmax(scaled if low is None else
                            scaled.masked_fill(low, float("-inf")), dim=-1)
    if step == "weights":
        return weights
    if step == _context_step(steps) and "v" in steps:
        return weights @ (steps["v"] if values is None else values)
    return None


def _words(name: str) -> str:
    return STEPS[name].words


# The advice after q and k found swapped; where the line that bound them
# says which name holds which (``attach.roles``), the binding may be
# what swapped them, and its words say so instead.
SWAP_FIX = ("Compute q @ k^T (each query's row holds its scores over the "
            "keys).")


def swap_fix_at(line: int) -> str:
    """The advice when line ``line`` bound the names to the other role."""
    return (f"Which tensor each name holds is said above (line {line}): "
            f"give each name its own projection there, or swap the names "
            f"in the product.")


def _scores_text(a: str, b: str, words: str, masked: bool) -> str:
    if (a, b) == ("k", "q"):
        later = "the mask, the softmax" if masked else "the softmax"
        return (f"These values ({words}) are computed from k @ q^T, the "
                f"transpose of q @ k^T (rows are keys, columns queries): q "
                f"and k are swapped in the product, so what follows "
                f"({later}, weights @ v) treats the keys as the queries. "
                f"{SWAP_FIX}")
    wrong = [f"{_words(x)} stand where {_words(y)} belong"
             for x, y in ((a, "q"), (b, "k")) if x != y]
    return (f"These values ({words}) are computed from {a} @ {b}^T "
            f"instead of q @ k^T: {' and '.join(wrong)}.")


def operands(step: str, got: torch.Tensor, steps: dict[str, torch.Tensor],
             head: int) -> Relation | None:
    """The step, computed the reference's way from other operands than
    q @ k^T (q and k swapped, v or q where k belongs, ...) or, at the
    context, from weights times another tensor than v: proven by
    recomputing the step from the named operands (the reference's own
    steps, which the student's matched) and finding the student's
    values."""
    if not all(r in steps for r in ROLES) or step not in (
            *ORIENTED, _context_step(steps)):
        return None
    words = _words(step)
    masked = "masked" in steps or "scaled_masked" in steps
    for a in ROLES:
        for b in ROLES:
            if (a, b) == ("q", "k"):
                continue
            found = chain(step, steps[a] @ steps[b].transpose(-2, -1), steps,
                          head)
            if found is not None and same(got, found):
                return Relation(f"operands: {a} @ {b}^T",
                                _scores_text(a, b, words, masked))
    scores = steps["q"] @ steps["k"].transpose(-2, -1)
    if masked and step in ("weights", _context_step(steps)) and same(
            got, chain(step, scores, steps, head, mask=False)):
        return Relation("mask missing",
                        f"These values ({words}) are what attention gives "
                        f"with no causal mask: every query also weighs the "
                        f"keys after it. Hide the future (key j > query i) "
                        f"before the softmax.")
    if step != _context_step(steps):
        return None
    for other in ("q", "k"):
        found = chain(step, scores, steps, head, steps[other])
        if same(got, found):
            return Relation(f"operands: weights @ {other}",
                            f"These values ({words}) are the attention "
                            f"weights times "
                            f"{_words(other)} instead of times the values "
                            f"v.")
    weights = chain("weights", scores, steps, head)
    if same(got, weights.transpose(-2, -1) @ steps["v"]):
        return Relation("operands: weights^T @ v",
                        f"These values ({words}) are the attention "
                        f"weights transposed "
                        f"(rows are keys) times the values v: each query's "
                        f"row of weights must multiply v, weights @ v.")
    return None


_SLICES = {"q": "queries", "k": "keys", "v": "values"}


def _heads_taken(got: torch.Tensor,
                 candidate: Callable[[int, int], torch.Tensor]
                 ) -> list[int] | None:
    """For each head i of ``got`` [b, heads, ...], the one head j whose
    ``candidate(i, j)`` its numbers equal; None if a head equals none or
    several, or every head is its own."""
    heads = got.shape[1]
    used = []
    for i in range(heads):
        found = [j for j in range(heads) if same(got[:, i], candidate(i, j))]
        if len(found) != 1:
            return None
        used.append(found[0])
    return None if used == list(range(heads)) else used


def head_slices(step: str, got: torch.Tensor,
                steps: dict[str, torch.Tensor]) -> Relation | None:
    """A loop's heads (stacked) that take another head's slice of q, k or
    v (``v[..., :head_dim]`` in every head): each head's numbers found,
    exactly, as one head of the reference's step."""
    expected = steps.get(step)
    if step not in _SLICES or expected is None or expected.dim() != 4 or \
            tuple(got.shape) != tuple(expected.shape) or got.shape[1] < 2:
        return None
    used = _heads_taken(got, lambda i, j: expected[:, j])
    if used is None:
        return None
    what = _SLICES[step]
    if len(set(used)) == 1:
        words = f"every head takes head {used[0]}'s slice of the {what}"
    else:
        words = "; ".join(f"head {i} takes head {j}'s slice"
                          for i, j in enumerate(used) if i != j)
    return Relation(f"head {what}: {used}",
                    f"These values ({_words(step)}, head by head) are the "
                    f"reference's, but {words}: head h takes the h-th "
                    f"slice of the columns, one head's width each.")


def query_sum(step: str, got: torch.Tensor,
              steps: dict[str, torch.Tensor]) -> Relation | None:
    """The weighted sum taken over the queries: each key's value times
    the sum of its column of weights (``(w[..., None] * v[..., None, :,
    :]).sum(-3)``), rebuilt from the reference's weights and values."""
    weights, v = steps.get("weights"), steps.get("v")
    if step not in ("context", "output") or weights is None or \
            v is None or step == "output" and "context" in steps or \
            tuple(got.shape) != tuple(v.shape) or \
            weights.shape[:-2] != v.shape[:-2]:
        return None
    if not same(got, weights.sum(-2).unsqueeze(-1) * v):
        return None
    return Relation("weighted sum over the queries",
                    "Your values are each value times the sum of its "
                    "column of weights: the weighted sum runs over the "
                    "queries, not the keys. Each query's row of weights "
                    "weighs the values: `weights @ v`.")


def head_values(step: str, got: torch.Tensor,
                steps: dict[str, torch.Tensor]) -> Relation | None:
    """Heads that weigh another head's values (``v[..., :head_dim]`` in
    every head): proven by rebuilding, from the reference's weights and
    values (which the student's matched), each head's context with the
    values of the head named, and finding the student's numbers, head by
    head (the context, or the heads merged in their usual order)."""
    context, weights, v = (steps.get(n) for n in ("context", "weights", "v"))
    if step not in ("context", "merged") or context is None or \
            weights is None or v is None or context.dim() != 4:
        return None
    b, h, s, d = context.shape
    if h < 2:
        return None
    if step == "merged":
        if tuple(got.shape) != (b, s, h * d):
            return None
        got = got.reshape(b, s, h, d).transpose(1, 2)
    elif tuple(got.shape) != (b, h, s, d):
        return None
    used = _heads_taken(got, lambda i, j: weights[:, i] @ v[:, j])
    if used is None:
        return None
    if len(set(used)) == 1:
        words = (f"every head weighs head {used[0]}'s values (the values' "
                 f"slice of head {used[0]} in every head)")
    else:
        words = "; ".join(f"head {i} weighs head {j}'s values"
                          for i, j in enumerate(used) if i != j)
    return Relation(f"head values: {used}",
                    f"These values ({_words(step)}) are what attention "
                    f"gives when {words}: each head must weigh its own "
                    f"slice of the values, as it does of the queries and "
                    f"keys.")


SHIFTABLE = ("scores", "scaled", "masked", "scaled_masked")


def shifted(step: str, got: torch.Tensor, steps: dict[str, torch.Tensor]
            ) -> Relation | None:
    """Scores minus their maximum over another dimension than the last
    (a hand-written softmax's shift taken per column): ``got`` equals a
    scores step minus its ``amax`` over dimension ``d`` at every position.
    A softmax over the last dimension is unchanged only by a shift that is
    constant along that dimension."""
    if step not in ORIENTED:
        return None
    for name in SHIFTABLE:
        scores = steps.get(name)
        if scores is None or scores.shape != got.shape or \
                not bool(torch.isfinite(scores).all()):
            continue
        for d in range(scores.dim() - 1):
            if scores.shape[d] > 1 and same(
                    got, scores - scores.amax(dim=d, keepdim=True)):
                return Relation(
                    f"shift over dimension {d}",
                    f"These values are {STEPS[name].words} minus their "
                    f"maximum over dimension {d} (`amax(dim={d}, "
                    f"keepdim=True)`): a softmax over the last dimension "
                    f"is unchanged only by subtracting a value that is the "
                    f"same along that dimension, each row's own maximum "
                    f"(`amax(dim=-1, keepdim=True)`).", name)
    return None


def row_scaled(step: str, got: torch.Tensor, expected: torch.Tensor
               ) -> Relation | None:
    """Weights proportional, row by row, to the expected ones, with rows
    that do not sum to 1: divided by something else than each row's
    sum."""
    if step != "weights" or got.shape != expected.shape or \
            not bool(torch.isfinite(got).all()):
        return None
    factor = row_factors(got, expected, expected > 0)
    sums = got.sum(-1)
    if factor is None or not bool((factor > 0).all()) or \
            not same(got, expected * factor) or \
            bool(((sums - 1).abs() <= 1e-4).all()):
        return None
    return Relation("weights: rows not normalised",
                    f"Your weights are the expected ones times one factor "
                    f"per row, and their rows sum to {_fmt(float(sums.min()))}"
                    f" to {_fmt(float(sums.max()))}, not 1: each row must be "
                    f"divided by its own sum (`sum(dim=-1, keepdim=True)`).")


def reshaped(records: list[tuple[int, torch.Tensor]], line: int,
             steps: dict[str, torch.Tensor], head: int
             ) -> tuple[Relation, str, torch.Tensor] | None:
    """Line ``line``'s values as an earlier record that gives a step,
    reshaped to that record's shape with its last two dimensions swapped
    (``k.reshape(b, h, d, s)`` for ``k.transpose(-2, -1)``): re-read in
    memory order, where the transpose gives other numbers. The relation,
    the step and the record transposed (what the line should hold)."""
    at = [t for n, t in records if n == line]
    if not at or at[-1].dim() < 2:
        return None
    got = at[-1]
    for n, t in records:
        if n >= line or t.dim() < 2 or t.shape[-1] == t.shape[-2] or \
                tuple(got.shape) != tuple(t.mT.shape):
            continue
        name = next((s for s in steps if s != "x" and
                     matches(t, s, steps[s], head)), None)
        if name is None or not same(got, t.reshape(got.shape)) or \
                same(got, t.mT):
            continue
        shape = ", ".join(map(str, got.shape))
        return Relation(
            f"reshaped: {name}",
            f"These values are {STEPS[name].words} of line {n} reshaped to "
            f"[{shape}]: `reshape` and `view` keep the numbers in memory "
            f"order, so each new row mixes positions and features. "
            f"Swapping the last two dimensions takes `.transpose(-2, -1)` "
            f"(or `.mT`)."), name, t.mT
    return None


def explain(step: str, got: torch.Tensor, expected: torch.Tensor,
            steps: dict[str, torch.Tensor], case: Case, head: int,
            head_name: str, sizes: dict[str, int],
            swapped: bool = False) -> Relation | None:
    """The first relation that holds at ``step`` (``got`` in a layout of
    the student's tensor that swaps its last two dimensions if
    ``swapped``: then no claim that depends on which axis is which), or
    None. Each relation is a fact checked on every position."""
    before = steps.get("scaled_masked", steps.get("scaled"))
    raw = steps.get("masked", steps.get("scores"))
    oriented = not (swapped and step in ORIENTED)
    tests = (lambda: shifted(step, got, steps) if oriented else None,
             lambda: row_scaled(step, got, expected) if oriented else None,
             lambda: precision(step, got, expected),
             lambda: operands(step, got, steps, head) if oriented else None,
             lambda: head_values(step, got, steps),
             lambda: query_sum(step, got, steps),
             lambda: head_slices(step, got, steps),
             lambda: mask_fill(step, got, expected),
             lambda: mask_region(step, got, expected, steps.get("scaled"),
                                 sizes) if oriented else None,
             lambda: softmax_axis(step, got, before) if oriented else None,
             lambda: temperature(step, got, expected, raw, head, head_name,
                                 sizes) if oriented else None,
             lambda: factor(step, got, expected, head, head_name, sizes),
             lambda: transposed_weight(step, got, expected, steps,
                                       case.weights, case.layers),
             lambda: bias(step, got, expected, case.weights, case.layers),
             lambda: input_scaled(step, got, expected, case.weights,
                                  case.layers, sizes),
             lambda: permutation(step, got, expected, steps))
    for test in tests:
        found = test()
        if found is not None:
            return found
    return None
