"""Dropout kinds, the attention homework's own: dropout on the attention
probabilities of Task 2.3b (``dropout_train``) and on the attention
weights of 3.1d and 3.3d (``dropout_on_weights``), checked without
assuming an order of random draws.

Both judge in three steps with one vocabulary: the baseline (the eval
values a train-mode call is judged against, ``Baseline``), what the call
shows as a named ``Finding`` (through ``dropout_pattern``), and one table
of messages (``MESSAGES``) whose templates each kind fills with its own
words (``PROBABILITIES``, ``WEIGHTS``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import Enum, auto
from string import Formatter
from typing import Any, Callable

import torch

from autograder import probes as P
from autograder.checks.base import ATTRIBUTE_NAME, CaseCheck, Context, Verdict
from autograder.checks.compare import close, fmt_shape, row_factors
from autograder.checks.outputs import returned_tensors
from autograder.checks.values import NEW, eval_differs
from autograder.text import mdsafe
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.checks.entries import Check
from autograder.checks.registry import register
from autograder.values import Case

from . import dropout_replay
from .attention_weights import softmax_shown
from .projections import (NOT_FINITE, nonlinear, projection_outputs,
                          projection_probes, valid_projections,
                          weights_unshown)


# --------------------------------------------------------------------------
# What a train-mode call shows

class Pattern(Enum):
    """How train-mode values relate to their eval values under dropout."""

    OK = auto()             # each 0 or eval / (1 - p), some dropped, some kept
    UNSCALED = auto()       # dropped, but the kept ones not rescaled
    OTHER_RATE = auto()     # kept ones rescaled by 1 / (1 - q), q not p
    WRONG = auto()          # some neither 0 nor eval / (1 - p)
    RENORMALISED = auto()   # each row's kept ones rescaled to sum to 1
    NONE_DROPPED = auto()
    ALL_DROPPED = auto()


@dataclass(frozen=True)
class DropoutPattern:
    """``dropout_pattern``'s classification of ``got`` under dropout ``p``:
    ``bad`` marks the values neither 0 nor their ``scaled`` eval value."""

    kind: Pattern
    got: torch.Tensor
    bad: torch.Tensor
    scaled: torch.Tensor
    p: float
    factor: float = 0.0     # OTHER_RATE: the one factor the kept ones have

    def facts(self) -> dict[str, Any]:
        """The numbers its message quotes."""
        if self.kind is Pattern.UNSCALED:
            return {"scale": 1 / (1 - self.p)}
        if self.kind is Pattern.OTHER_RATE:
            return {"factor": self.factor, "rate": 1 - 1 / self.factor,
                    "scale": 1 / (1 - self.p), "times": self._times()}
        if self.kind is Pattern.WRONG:
            first = int(self.bad.flatten().nonzero()[0])
            return {"bad": int(self.bad.sum()), "total": self.bad.numel(),
                    "expected": float(self.scaled.flatten()[first]),
                    "got": float(self.got[first])}
        return {}

    def _times(self) -> str:
        """The factor as the module's rate applied k times, if it is."""
        for k in range(2, 5):
            if abs(self.factor * (1 - self.p) ** k - 1) < 1e-3:
                return f" (the module's {self.p:g} applied {k} times " \
                       f"gives this)"
        return ""


OTHER_RATE_MARGIN = 0.005   # how far a rate is from p to be another


def dropout_pattern(got: torch.Tensor, clean: torch.Tensor, p: float,
                    rel: float, zero_atol: float) -> DropoutPattern:
    """Classify ``got`` (train mode) against ``clean`` (eval mode): a value
    is kept when within ``rel`` of eval / (1 - p) (plus ``zero_atol``)."""
    scaled = clean / (1 - p)
    zero = got == 0
    bad = ~(zero | ((got - scaled).abs() <= rel * scaled.abs() + zero_atol))
    if bool(bad.any()):
        unscaled = (got - clean).abs() <= rel * clean.abs() + zero_atol
        if bool((zero | unscaled).all()):
            kind = Pattern.UNSCALED
        else:
            factor = _one_factor(got, clean, zero, rel, zero_atol)
            # a rate that rounds to the module's is a wrong value, not a
            # typed-in rate (rates are typed to two decimals at most)
            if factor is not None and \
                    abs((1 - 1 / factor) - p) >= OTHER_RATE_MARGIN:
                return DropoutPattern(Pattern.OTHER_RATE, got, bad, scaled,
                                      p, factor)
            kind = Pattern.WRONG
    elif not bool((zero & (scaled > 0)).any()):
        kind = Pattern.NONE_DROPPED
    elif not bool((got > 0).any()):
        kind = Pattern.ALL_DROPPED
    else:
        kind = Pattern.OK
    return DropoutPattern(kind, got, bad, scaled, p)


def classify(got: torch.Tensor, clean: torch.Tensor,
             finite: torch.Tensor, p: float, rel: float,
             zero_atol: float) -> DropoutPattern:
    """``dropout_pattern`` on the positions ``finite`` marks; wrong values
    whose rows (all finite) are rescaled to sum to 1 are RENORMALISED."""
    pattern = dropout_pattern(got[finite], clean[finite], p, rel, zero_atol)
    if pattern.kind is Pattern.WRONG and bool(finite.all()) and \
            _renormalised(got, clean, got == 0, rel, zero_atol):
        return replace(pattern, kind=Pattern.RENORMALISED)
    return pattern


def _renormalised(got: torch.Tensor, clean: torch.Tensor,
                  zero: torch.Tensor, rel: float, zero_atol: float) -> bool:
    """Some values dropped, and in each row (last dimension) the kept
    ones are their eval values times one factor, the row summing to 1."""
    if got.dim() < 1 or not bool(zero.any()) or \
            not bool(torch.isfinite(got).all()):
        return False
    rows_sum = got.sum(-1)
    if not bool(((rows_sum - 1).abs() <= 1e-4).all()):
        return False
    kept = ~zero & (clean.abs() > zero_atol)
    factor = row_factors(got.where(kept, torch.zeros_like(got)), clean,
                         kept)
    if factor is None:
        return False
    fits = (got - factor * clean).abs() <= rel * (factor * clean).abs() + \
        zero_atol
    return bool((fits | zero).all()) and bool((factor > 1 + rel).any())


class Finding(Enum):
    """What a dropout item says about a train-mode call that fails."""

    WRONG_SHAPE = auto()
    NAN_IN_TRAIN = auto()        # NaN where the eval values are finite
    NOT_APPLIED = auto()         # train mode equals eval mode
    UNSCALED = auto()
    OTHER_RATE = auto()          # a dropout rate that is not the module's
    WRONG_VALUES = auto()
    RENORMALISED = auto()
    NONE_DROPPED = auto()
    ALL_DROPPED = auto()
    # Dropout on the probabilities (2.3b): where att and them disagree.
    PROBS_NOT_DROPPED = auto()   # probs equal eval, att changes
    ATT_NOT_FROM_PROBS = auto()  # att is not their weighted sum
    ATT_DROPPED = auto()         # dropout on att itself
    ATT_IS_PROBS = auto()        # att holds the probabilities' numbers
    ATT_EQUALS_EVAL = auto()
    # Dropout on the weights (3.1d, 3.3d): the two copies differ.
    NOT_ON_WEIGHTS = auto()
    EVAL_FOLLOWS_RATE = auto()   # the eval output changes with p
    # Train mode after an eval call differs from a new module's.
    AFTER_EVAL = auto()


FROM_PATTERN = {Pattern.UNSCALED: Finding.UNSCALED,
                Pattern.OTHER_RATE: Finding.OTHER_RATE,
                Pattern.WRONG: Finding.WRONG_VALUES,
                Pattern.RENORMALISED: Finding.RENORMALISED,
                Pattern.NONE_DROPPED: Finding.NONE_DROPPED,
                Pattern.ALL_DROPPED: Finding.ALL_DROPPED}


def _one_factor(got: torch.Tensor, clean: torch.Tensor, zero: torch.Tensor,
                rel: float, zero_atol: float) -> float | None:
    """The factor > 1 every kept value is its eval value times (dropout
    with another rate than the module's, e.g. a hard-coded one), or
    None."""
    kept = ~zero & (clean.abs() > zero_atol)
    if not bool(kept.any()) or not bool(zero.any()):
        return None
    factor = float((got[kept] / clean[kept]).median())
    if not 1 < factor < 1e6:
        return None
    fits = (got - factor * clean).abs() <= rel * (factor * clean).abs() + \
        zero_atol
    return factor if bool((zero | fits).all()) else None


# --------------------------------------------------------------------------
# What the student reads

@dataclass(frozen=True)
class Words:
    """A kind's words in the message templates (a word may quote the
    finding's facts, e.g. ``{bad}``)."""

    unit: str             # one of the things dropout acts on
    units: str
    seen_has: str         # what the train-mode call returned, "has"
    seen_contains: str
    eval_is: str          # its eval counterpart, "is"
    same_as_eval: str     # train mode equals eval mode
    apply_to: str         # where self.dropout belongs
    rescale_tip: str
    shape_why: str
    wrong_which: str      # the values neither 0 nor rescaled
    wrong_tail: str       # an example of the values, or ""


PROBABILITIES = Words(
    unit="probability", units="probabilities",
    seen_has="the probabilities have",
    seen_contains="the probabilities contain", eval_is="the eval ones are",
    same_as_eval="the probabilities and att equal the eval ones",
    apply_to="softmax probabilities",
    rescale_tip=" (nn.Dropout scales them for you)",
    shape_why=(", and their head split does not give your own eval att, "
               "so dropout cannot be checked"),
    wrong_which="{bad} of {total} probabilities",
    wrong_tail=", e.g.: expected 0 or {expected:.6g}, got {got:.6g}")

WEIGHTS = Words(
    unit="weight", units="weights", seen_has="the output has",
    seen_contains="the output contains", eval_is="the eval output is",
    same_as_eval="the output equals the eval output",
    apply_to="attention weights", rescale_tip="", shape_why="",
    wrong_which="the attention weights", wrong_tail="")

# Finding -> (message, short message without values, for hidden cases).
MESSAGES: dict[Finding, tuple[str, str]] = {
    Finding.WRONG_SHAPE: (
        "in train mode {seen_has} shape {got_shape}, expected {want_shape}"
        "{shape_why}", "wrong shape"),
    Finding.NAN_IN_TRAIN: (
        "in train mode {seen_contains} NaN or infinite values where "
        "{eval_is} finite", "NaN values"),
    Finding.NOT_APPLIED: (
        "no dropout in train mode: with dropout {p:g} {same_as_eval}. "
        "Apply self.dropout to the {apply_to}.", "dropout not applied"),
    Finding.UNSCALED: (
        "{units} are dropped but the kept ones are not scaled by "
        "1/(1 - p) = {scale:.4g}: use self.dropout{rescale_tip}",
        "kept {units} not rescaled"),
    Finding.OTHER_RATE: (
        "in train mode the kept {units} are their eval value times "
        "{factor:.4g} = 1/(1 - {rate:.3g}): a dropout rate of {rate:.3g}, "
        "not the module's {p:g} (expected 1/(1 - p) = {scale:.4g}){times}. "
        "Apply one dropout built from the constructor's argument "
        "(`nn.Dropout(dropout)`), once.",
        "a dropout rate that is not the module's"),
    Finding.WRONG_VALUES: (
        "in train mode {wrong_which} are neither 0 nor their eval value / "
        "(1 - p){wrong_tail}",
        "wrong train-mode {units}"),
    Finding.RENORMALISED: (
        "in train mode (dropout {p:g}) the kept {units} of each row are "
        "their eval values times one factor of that row, and every row "
        "sums to 1: the rows are rescaled to sum to 1 after dropout. "
        "Dropout keeps each at its eval value / (1 - p), and the rows then"
        " need not sum to 1: use self.dropout's output as it is.",
        "rows rescaled to sum to 1 after dropout"),
    Finding.EVAL_FOLLOWS_RATE: (
        "in eval mode {seen_has} other values with dropout {p:g} than "
        "with dropout 0: in eval mode dropout does nothing, whatever its "
        "rate.{eval_tip}",
        "the eval output depends on the dropout rate"),
    Finding.NONE_DROPPED: (
        "in train mode (dropout {p:g}) no {unit} was dropped: apply "
        "self.dropout to the attention {units}", "dropout not applied"),
    Finding.ALL_DROPPED: (
        "in train mode (dropout {p:g}) every {unit} was dropped: apply "
        "self.dropout to the attention {units}", "dropout not applied"),
    Finding.PROBS_NOT_DROPPED: (
        "probabilities not dropped out: in train mode (dropout {p:g}) the "
        "returned probabilities equal the eval ones while att changes: "
        "{where}. Use the probabilities after self.dropout both for the "
        "weighted sum of the values and as the returned probs.",
        "probabilities not dropped out"),
    Finding.ATT_NOT_FROM_PROBS: (
        "att doesn't follow from the returned probabilities: {how}. Use "
        "the dropped-out probabilities for the weighted sum of the values "
        "and return those same probabilities.",
        "att does not follow from the probabilities"),
    Finding.ATT_DROPPED: (
        "dropout is applied to the output att (in train mode, dropout "
        "{p:g}, every value of att is 0 or its eval value / (1 - p)). Use "
        "the dropped-out probabilities for the weighted sum of the values.",
        "probabilities not dropped out"),
    Finding.ATT_IS_PROBS: (
        "the returned att holds the same numbers as the returned "
        "probabilities: att is the attention weights, not their weighted "
        "sum of the values. Return the output (the weighted sum, heads "
        "merged and mixed) as att.",
        "att is the probabilities"),
    Finding.ATT_EQUALS_EVAL: (
        "att equals the eval output, so att was computed from the "
        "probabilities before dropout. Use the dropped-out probabilities "
        "for the weighted sum of the values.",
        "att does not follow from the probabilities"),
    Finding.NOT_ON_WEIGHTS: (
        "dropout is applied elsewhere than to the attention weights (in "
        "train mode the probe's two copies of the weights are dropped out "
        "differently): apply self.dropout to the softmax weights, then "
        "multiply by the values.",
        "dropout not on the weights"),
    Finding.AFTER_EVAL: (
        "dropout is right in train mode on a new module, but not once the "
        "module has made a call in eval mode{changed}: then {why} An eval "
        "call must leave the module as `__init__` made it (`model.eval()` "
        "and `model.train()` already switch dropout off and on).",
        "dropout wrong in train mode after an eval call"),
}

# Findings proven on the values whose att is not an output: a replay of
# where its dropout went would name a place the code does not have.
NO_REPLAY = {MESSAGES[Finding.ATT_IS_PROBS][1],
             MESSAGES[Finding.AFTER_EVAL][1]}
AFTER_EVAL = ":after-eval"     # the id suffix of the train call made after


def after_eval_probe(train: Probe) -> Probe:
    """``train`` made on a module called once in eval mode before
    (``Probe.warm_eval``), under the same seed: a correct module gives
    the same result."""
    return replace(train, id=train.id + AFTER_EVAL, warm_eval=True)


def _drifted(warm: ProbeResult, own: ProbeResult) -> bool:
    """Whether the warm-up changed the module's eval output: its eval
    call made again (``warm.repeat``) is far from a new module's
    (``own``'s first output), as the eval items' second call sees it."""
    if not warm.repeat or not own.ok or not own.outputs:
        return False
    again, first = warm.repeat[0], own.outputs[0]
    return again.shape != first.shape or not close(
        again.double(), first.double(), 1e-4, 1e-4, equal_nan=True)


def after_eval(verdict: Verdict, again: Callable[[], Verdict],
               warm: ProbeResult, own: ProbeResult,
               words: "Words") -> Verdict:
    """A passing ``verdict`` on a new module's train call, failed when
    ``again`` (the same judgement of the train call made after an eval
    call, ``after_eval_probe``) fails: the eval call left the module so
    that its dropout is no longer right. As it was otherwise, and when
    that call raised or hung (the eval items judge that)."""
    # An eval call that changes the module's eval output too (a mask
    # scaled in place) is charged by the eval items' second call: not
    # here again.
    if not verdict.ok or not warm.ok or _drifted(warm, own):
        return verdict
    later = again()
    if later.ok:
        return verdict
    names = ", ".join(mdsafe.code_span(f"self.{n.removesuffix(NEW)}")
                      for n in warm.changed[:4])
    changed = f" (the eval call changed {names})" if names else ""
    return say(Finding.AFTER_EVAL, words, changed=changed,
               why=later.message)


# EVAL_FOLLOWS_RATE's {eval_tip}: what the eval values prove, if anything
EVAL_TIPS = {
    "scaled": (" Scale nothing by (1 - p): your eval {units} are the "
               "rate-free ones times 1 - p, and self.dropout already scales "
               "the kept {units} by 1/(1 - p) in train mode."),
    "dropped": (" Your {units} are dropped out in eval mode too (each 0 or "
                "its rate-free value / (1 - p)): use self.dropout, an "
                "nn.Dropout built in __init__, which follows the module's "
                "mode."),
    "": ""}

# PROBS_NOT_DROPPED's {where}: is att itself dropped out?
WHERE = {True: "dropout is applied to the output att",
         False: "dropout is applied somewhere else (to the values, to the "
                "output, or to a copy of the probabilities while the ones "
                "before dropout are returned)"}
# ATT_NOT_FROM_PROBS's {how}: does att equal the eval output?
HOW = {True: "att equals the eval output, so att was computed from the "
             "probabilities before dropout",
       False: "dropout applied after (or before) the weighted sum, or the "
              "returned probabilities are not the ones used"}


def _eval_tip(own: torch.Tensor, rate_free: torch.Tensor, p: float,
              params: Any) -> str:
    """EVAL_FOLLOWS_RATE's tip, only what the eval values prove: scaled
    by 1 - p, or dropped out as in train mode; else none."""
    own, rate_free = own.double(), rate_free.double()
    if close(own, rate_free * (1 - p), params.same_atol, equal_nan=True):
        return EVAL_TIPS["scaled"].format(units=WEIGHTS.units)
    finite = torch.isfinite(own) & torch.isfinite(rate_free)
    if dropout_pattern(own[finite], rate_free[finite], p,
                       params.relative_tolerance,
                       params.zero_atol).kind is Pattern.OK:
        return EVAL_TIPS["dropped"].format(units=WEIGHTS.units)
    return EVAL_TIPS[""]


def say(finding: Finding, words: Words, **facts: Any) -> Verdict:
    """The failing verdict of ``finding``: its templates filled with the
    kind's ``words`` (themselves filled with ``facts``) and ``facts``."""
    text, short = MESSAGES[finding]
    used = {name for template in (text, short)
            for _, name, _, _ in Formatter().parse(template) if name}
    filled = {name: word.format(**facts) for name, word in
              asdict(words).items() if name in used}
    return Verdict(False, text.format(**filled, **facts),
                   short.format(**filled, **facts))


@dataclass(frozen=True)
class Baseline:
    """The eval values a train-mode call is judged against: the
    submission's own where the kind can use them (so that a wrong scale,
    mask or head split costs its own item, not dropout's too), else the
    frozen ones. Positions they leave NaN or infinite (a mask hiding a
    whole row) are left out."""

    clean: torch.Tensor

    @classmethod
    def of(cls, frozen: torch.Tensor,
           own: torch.Tensor | None) -> Baseline:
        """``own`` if usable (not None), else ``frozen``."""
        return cls((frozen if own is None else own).double())

    @property
    def finite(self) -> torch.Tensor:
        return torch.isfinite(self.clean)

    @property
    def established(self) -> bool:
        """Whether anything is finite to judge against: a baseline that is
        NaN or infinite everywhere (the submission's own eval values under
        another unit's bug, e.g. a mask that hides every key) cannot judge
        dropout, and the case gives no verdict (``no_verdict``): that bug
        costs its own item, not this one."""
        return bool(self.finite.any())

    def nan_finding(self, *train: torch.Tensor) -> Finding | None:
        """NaN in a train-mode tensor where the baseline is finite; None
        if there is none."""
        finite = self.finite
        if any(bool((~torch.isfinite(t) & finite).any()) for t in train):
            return Finding.NAN_IN_TRAIN
        return None


NO_BASELINE = ("your own eval values are NaN or infinite at every "
               "position, so there is nothing to judge dropout against")


def no_verdict() -> Verdict:
    """A case whose baseline cannot be established: passed without
    evidence, as the rubric's "no points without work" reads it
    (``CaseCheck.no_evidence``): no point lost for another unit's bug,
    none earned without a case that shows dropout. What it measured is
    said, no cause (the weights may well follow the queries and keys)."""
    return Verdict(True, evidence=False, unshown=NO_BASELINE)


# --------------------------------------------------------------------------
# Kinds

@dataclass(frozen=True)
class DropoutParams:
    """What both dropout kinds compare with."""

    # A kept value equals eval / (1 - p) within this fraction of it ...
    relative_tolerance: float = 1e-5
    # ... plus this (values near 0).
    zero_atol: float = 1e-7
    # Train-mode values within this of the eval ones: no dropout.
    same_atol: float = 1e-5


@dataclass(frozen=True)
class DropoutTrainParams(DropoutParams):
    """2.3b: also how att follows from the returned probabilities."""

    # att == einsum(P, value_mix) + mix.bias within this.
    att_atol: float = 1e-5
    # Eval probabilities for x and 2x differ beyond this: the evidence.
    evidence_atol: float = 1e-4
    # The value projection's and the output mix's attribute names: a head
    # split the probabilities' shape says is rebuilt from their weights.
    value_layer: str = field(kw_only=True)
    mix_layer: str = field(kw_only=True)

    def __post_init__(self) -> None:
        for key in ("value_layer", "mix_layer"):
            if not ATTRIBUTE_NAME.fullmatch(str(getattr(self, key))):
                raise ValueError(f"{key} must be a layer's attribute name, "
                                 f"e.g. \"v\" (got {getattr(self, key)!r})")


@dataclass(frozen=True)
class DropoutOnWeightsParams(DropoutParams):
    """3.1d, 3.3d: also the probe's two copies of the weights."""

    # The two halves [A | A] are equal within this.
    halves_atol: float = 1e-6
    # ``causal.nonlinear``'s threshold for x, 2x, 3x: the evidence.
    nonlinear_threshold: float = 1e-4
    # The query and key projections' attribute names, zeroed in turn: the
    # weights must follow them (the evidence).
    projections: list[str] = field(kw_only=True)
    # The value projection's attribute name: where a failing call's
    # dropout went is replayed through it ("" : not tried).
    # Also set through the evidence's probe state so that a call's output
    # is the attention weights, judged a softmax of the scores
    # (attention_weights.py), with ``output_layer`` (the layer after the
    # heads, if any) set to the identity.
    value_layer: str = ""
    output_layer: str = ""

    def __post_init__(self) -> None:
        valid_projections(self.projections)
        for key in ("value_layer", "output_layer"):
            name = getattr(self, key)
            if name and not ATTRIBUTE_NAME.fullmatch(str(name)):
                raise ValueError(f"{key} must be a layer's attribute "
                                 f"name, e.g. \"W_value\" (got {name!r})")


def _split_value_mix(case: Case, shape: torch.Size, value: str, mix: str
                     ) -> torch.Tensor | None:
    """``value_mix`` (att = einsum(P, G) + mix.bias) of the head split
    that probabilities of ``shape`` [b * heads, s, s] say, from the case's
    own ``value`` and ``mix`` layers' weights (the rubric names them);
    None if no split of ``hidden`` makes it."""
    b, s, _ = case.tensors["x"].shape
    w = case.weights
    if not {f"{value}.weight", f"{value}.bias", f"{mix}.weight"} <= set(w):
        return None   # the case has no such layers
    hidden = w[f"{value}.weight"].shape[0]
    if len(shape) != 3 or tuple(shape[1:]) != (s, s) or not shape[0] or \
            shape[0] % b or hidden % (shape[0] // b):
        return None
    heads = shape[0] // b
    size = hidden // heads
    v = case.tensors["x"].double() @ w[f"{value}.weight"].double().T + \
        w[f"{value}.bias"].double()
    v = v.view(b, s, heads, size).transpose(1, 2)
    w_mix = w[f"{mix}.weight"].double().view(-1, heads, size)
    return v @ w_mix.permute(1, 2, 0)


def _wrong_train_shape(probs: torch.Tensor, clean: torch.Tensor) -> Verdict:
    return say(Finding.WRONG_SHAPE, PROBABILITIES,
               got_shape=fmt_shape(probs.shape),
               want_shape=fmt_shape(clean.shape))


@register("item", "dropout_train", uses_cases=True,
          params=DropoutTrainParams)
class DropoutTrain(CaseCheck):
    """Dropout on the attention probabilities, checked without assuming an
    order of random draws: every returned probability is 0 or its eval
    value / (1 - p), some are dropped and some kept, and ``att`` follows
    from the returned probabilities through ``value_mix``."""

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """One seeded train-mode call with return_attention=True, and the
        same call in eval mode (shared with 2.1/2.3a)."""
        scaled = P.case_probe(case, timeout=check.timeout,
                              kwargs={"return_attention": True},
                              suffix="*2", x=2 * case.tensors["x"])
        train = P.case_probe(case, train=True, timeout=check.timeout,
                             kwargs={"return_attention": True})
        return [train,
                P.case_probe(case, timeout=check.timeout,
                             kwargs={"return_attention": True},
                             again=True), scaled,   # eval random? (judge)
                after_eval_probe(train)]

    # No points without attention: the eval probabilities must change with
    # the input (on x and 2x), as softmax(q k^T) does; fixed weights
    # (uniform, constant) show dropout on nothing the module computed.
    no_evidence = ("in every case the eval probabilities are the same for "
                   "x and 2x: the attention weights do not depend on the "
                   "input. Compute them from the queries and keys")

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """``_judge_call`` on the train call of a new module, then on the
        one made after an eval call (``after_eval``)."""
        verdict = self._judge_call(check, case, results, probes, ctx)
        later = [results[3], *results[1:3]]
        return after_eval(verdict, lambda: self._judge_call(
            check, case, later, [probes[3], *probes[1:3]], ctx),
            results[3], results[1], PROBABILITIES)

    def _judge_call(self, check: Check, case: Case,
                    results: list[ProbeResult], probes: list[Probe],
                    ctx: Context) -> Verdict:
        """Apply the three conditions; explain the first that fails.

        Judged against the submission's own eval call, so that a wrong
        scale, mask or head split costs 2.1/2.2/2.3a, not this point too:
        positions its own eval probabilities leave NaN or infinite (a mask
        hiding a whole row) are left out, and when its own eval ``att``
        does not follow from its own eval probabilities (a wrong split,
        merge or mix), ``att`` is only required to change with dropout.
        Probabilities of another shape are judged only if the head split
        that shape says gives the submission's own eval ``att``.
        """
        params = check.params
        outputs, problem = returned_tensors(results[0], probes[0], 2)
        if outputs is None:
            return Verdict(False, problem, "wrong return value")
        own, _ = returned_tensors(results[1], probes[1], 2)
        own_eval = own   # the evidence below: its call, random or not
        if own is not None and eval_differs(results[1], probes[1], own[0],
                                            ctx.mistake_atol):
            # Random in eval mode (dropout left on: 2.3a says so): judge
            # against the frozen eval values instead.
            own = None
        call = _TrainCall.of(case, *outputs, own, params)
        if isinstance(call, Verdict):
            return call
        verdict = _train_finding(call, float(case.init["dropout"]), params)
        if verdict is not None:
            return _replayed(verdict, case, outputs[0], own,
                             params.value_layer, params.mix_layer)
        other, _ = returned_tensors(results[2], probes[2], 2)
        return Verdict(True, evidence=other is not None and
                       own_eval is not None and
                       not close(own_eval[1], other[1],
                                 params.evidence_atol, equal_nan=True))


def _replayed(verdict: Verdict, case: Case, got: torch.Tensor,
              own: list[torch.Tensor] | None, value: str,
              mix: str | None) -> Verdict:
    """A failing ``verdict`` with where its dropout went, when the
    reference's dropout mask replayed on the submission's own eval
    values (``own``: its eval output and weights) proves it
    (``dropout_replay``); as it was otherwise."""
    if verdict.ok or own is None or case.seed is None or \
            verdict.short in NO_REPLAY:
        return verdict
    b, s, _ = case.tensors["x"].shape
    weights = own[1]
    if weights.numel() % (b * s * s):
        return verdict
    weights = weights.reshape(b, -1, s, s)
    x = case.tensors["x"]
    values = dropout_replay.linear(x, case.weights, value) if value \
        else None

    def after(merged: torch.Tensor) -> torch.Tensor:
        mixed = dropout_replay.linear(merged, case.weights, mix) \
            if mix else merged
        return merged if mixed is None else mixed

    said = dropout_replay.where_dropout(
        got, weights, own[0], values, after, case.seed,
        float(case.init["dropout"]))
    if not said:
        return verdict
    stop = "" if verdict.message.endswith((".", "?", "!")) else "."
    return replace(verdict, message=f"{verdict.message}{stop} {said}")


@dataclass(frozen=True)
class _TrainCall:
    """2.3b's train-mode call and the eval values it is judged against:
    the submission's own where they can be used, else the frozen ones."""

    att: torch.Tensor
    probs: torch.Tensor
    frozen: torch.Tensor           # the frozen eval probabilities
    own_probs: torch.Tensor | None
    eval_att: torch.Tensor
    value_mix: torch.Tensor
    bias: torch.Tensor
    # Whether att must follow from the probabilities through value_mix
    # (not when its own eval att does not follow from its own eval
    # probabilities: a wrong split, merge or mix).
    value_path: bool
    size: tuple[int, int]          # the input's batch and tokens

    def weighted(self, weights: torch.Tensor) -> torch.Tensor:
        """att for attention ``weights``: their weighted sum of the
        values, mixed, plus the mix's bias."""
        return _weighted(weights, self.value_mix, self.bias, self.size)

    @classmethod
    def of(cls, case: Case, att: torch.Tensor, probs: torch.Tensor,
           own: list[torch.Tensor] | None,
           params: DropoutTrainParams) -> _TrainCall | Verdict:
        """The call judged against ``own`` (its eval call's att and
        probabilities, None if unusable) or the frozen values; a failing
        verdict if its probabilities' shape cannot be judged."""
        att_atol = params.att_atol
        frozen = case.tensors["attention"]
        b, s, _ = case.tensors["x"].shape
        h = case.size("heads")
        if tuple(probs.shape) in ((b, h, s, s),) or \
                _only_unflattened(probs, own, frozen, att_atol):
            probs = probs.reshape(frozen.shape)   # 2.1 already says so
        eval_att = case.tensors["output"].double()
        value_mix = case.tensors["value_mix"].double()
        bias = case.weights[f"{params.mix_layer}.bias"].double()
        value_path, own_probs = True, None
        if tuple(probs.shape) != tuple(frozen.shape):
            # A wrong head split (e.g. head_size heads of num_heads) makes
            # another shape in eval mode too: 2.1-2.3a cost that. Dropout
            # is judged against the submission's own eval probabilities,
            # and only where the split its shape says explains its own
            # eval att: else any shape would let att merely change (a
            # dropped-out copy returned, dropout on the output).
            split = _split_value_mix(case, probs.shape, params.value_layer,
                                     params.mix_layer)
            if own is None or split is None \
                    or tuple(own[1].shape) != tuple(probs.shape) \
                    or tuple(own[0].shape) != tuple(att.shape):
                return _wrong_train_shape(probs, frozen)
            own_probs, eval_att, value_mix = (own[1], own[0].double(),
                                              split)
            if not close(eval_att, _weighted(own_probs.double(), value_mix,
                                             bias, (b, s)),
                         att_atol, equal_nan=True):
                return _wrong_train_shape(probs, frozen)
        elif own is not None and \
                own[1].numel() == frozen.numel() and \
                tuple(own[0].shape) == tuple(att.shape):
            own_probs = own[1].reshape(frozen.shape)
            eval_att = own[0].double()
            value_path = close(eval_att, _weighted(own_probs.double(),
                                                   value_mix, bias, (b, s)),
                               att_atol, equal_nan=True)
        return cls(att, probs, frozen, own_probs, eval_att, value_mix, bias,
                   value_path, (b, s))


def _only_unflattened(probs: torch.Tensor,
                      own: list[torch.Tensor] | None,
                      frozen: torch.Tensor, atol: float) -> bool:
    """Probabilities of another shape whose own eval ones, reshaped to
    [b*h, s, s], are the expected ones (``[b, h*s, s]`` from a
    ``flatten(1, 2)``): the layout 2.1 and 2.2 charge, not dropout's."""
    if own is None or tuple(probs.shape) == tuple(frozen.shape) or \
            tuple(own[1].shape) != tuple(probs.shape) or \
            probs.numel() != frozen.numel():
        return False
    return close(own[1].reshape(frozen.shape).double(), frozen.double(),
                 atol, equal_nan=True)


def _weighted(weights: torch.Tensor, value_mix: torch.Tensor,
              bias: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """einsum(P, value_mix) + bias, P viewed [batch, heads, seq, seq]."""
    b, s = size
    return torch.einsum("bhst,bhtd->bsd", weights.reshape(
        b, value_mix.shape[1], s, s), value_mix) + bias


def _train_finding(call: _TrainCall, p: float,
                   params: DropoutTrainParams) -> Verdict | None:
    """The first of 2.3b's conditions the call fails, said; None if it
    meets them all; no verdict where the baseline is NaN everywhere."""
    base = Baseline.of(call.frozen, call.own_probs)
    if not base.established:
        return no_verdict()
    clean, finite = base.clean, base.finite
    got, att, eval_att = call.probs.double(), call.att, call.eval_att
    finding = base.nan_finding(got)
    if finding is not None:
        return say(finding, PROBABILITIES)
    pattern = classify(got, clean, finite, p, params.relative_tolerance,
                       params.zero_atol)
    same_att = close(att, eval_att, params.same_atol, equal_nan=True)
    if pattern.kind in (Pattern.UNSCALED, Pattern.OTHER_RATE,
                        Pattern.WRONG, Pattern.RENORMALISED) and \
            close(got, clean, params.same_atol, equal_nan=True):
        if same_att:
            return say(Finding.NOT_APPLIED, PROBABILITIES, p=p)
        on_output = dropout_pattern(
            att.double(), eval_att, p, params.relative_tolerance,
            params.zero_atol).kind is Pattern.OK
        return say(Finding.PROBS_NOT_DROPPED, PROBABILITIES, p=p,
                   where=WHERE[on_output])
    if pattern.kind is not Pattern.OK:
        return say(FROM_PATTERN[pattern.kind], PROBABILITIES, p=p,
                   **pattern.facts())
    if att.numel() == got.numel() and close(
            att.reshape(-1), got.reshape(-1), params.same_atol,
            equal_nan=True):
        # Proven on the values: no word about where dropout went.
        return say(Finding.ATT_IS_PROBS, PROBABILITIES)
    if call.value_path and not close(att, call.weighted(got),
                                     params.att_atol, equal_nan=True):
        return say(Finding.ATT_NOT_FROM_PROBS, PROBABILITIES,
                   how=HOW[same_att])
    if not call.value_path and dropout_pattern(
            att.double(), eval_att, p, params.relative_tolerance,
            params.zero_atol).kind is Pattern.OK:
        # att cannot be checked against these probabilities, but
        # dropout on att itself shows (a dropped-out copy returned).
        return say(Finding.ATT_DROPPED, PROBABILITIES, p=p)
    if not call.value_path and same_att:
        return say(Finding.ATT_EQUALS_EVAL, PROBABILITIES)
    return None


@register("item", "dropout_on_weights", uses_cases=True,
          params=DropoutOnWeightsParams)
class DropoutOnWeights(CaseCheck):
    """Dropout on the attention weights, on a "dropout_probe" case: x = I
    and every head's values [I; I], so each head's output is [A | A] with A
    its (dropped-out) weights. Dropout on the weights keeps the halves
    equal, each entry 0 or eval / (1 - p); dropout anywhere after the
    weighted sum drops the halves independently. No order of random draws
    is assumed."""

    no_evidence = ("the eval output is proportional to the input (x, 2x "
                   "and 3x give outputs on a line), or does not change "
                   "when the query or the key projection's weights are "
                   "zeroed, in every case: the attention weights do not "
                   "depend on the input through the queries and keys, so "
                   "dropout on them shows nothing. Compute them from the "
                   "queries and keys, "
                   "softmax(q k^T / sqrt(d_k)) with the future masked")
    unshown = ("no case shows the attention weights computed from the "
               "queries and keys, which this item needs to judge dropout "
               "on them: {facts}. That does not show that your weights "
               "ignore the queries and keys; the feedback on this task's "
               "output says where your values leave the reference")

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """One seeded train-mode call, the same call in eval mode, eval
        calls on 2x and 3x, ``projection_probes`` (weights that follow
        the queries and keys, and are a softmax of their scores), and the
        eval call with dropout 0."""
        found = [P.case_probe(case, train=True, timeout=check.timeout),
                 P.case_probe(case, timeout=check.timeout)]
        for factor in (2, 3):
            found.append(P.case_probe(case, timeout=check.timeout,
                                      suffix=f"*{factor}",
                                      x=factor * case.tensors["x"]))
        found += projection_probes(case, check.timeout,
                                   check.params.projections,
                                   check.params.value_layer,
                                   check.params.output_layer)
        # Last, the eval call of a module built with dropout 0: in eval
        # mode the rate changes nothing (weights times 1 - p in both
        # modes, which train mode's own check cannot see, fail).
        plain = P.case_probe(case, timeout=check.timeout, suffix=":p=0")
        return found + [after_eval_probe(found[0]),
                        replace(plain, init={**plain.init, "dropout": 0.0})]

    @staticmethod
    def _evidence(results: list[ProbeResult], probes: list[Probe],
                  params: DropoutOnWeightsParams, case: Case) -> Verdict:
        """A passing verdict, with evidence if the eval outputs on x, 2x
        and 3x lie off a line (see ``nonlinear``), move when the query or
        the key projection is zeroed, and the weights are a softmax of
        the scores (see ``causal.weights_unshown``); without, what was
        measured when that is no proof the weights ignore them."""
        found = [returned_tensors(r, p, None)[0] if r.ok else None
                 for r, p in zip(results[1:4], probes[1:4])]
        if None not in found and found[0][0].numel() and \
                not bool(torch.isfinite(found[0][0]).any()):
            return Verdict(True, evidence=False, unshown=NOT_FINITE)
        if None in found or not nonlinear([f[0] for f in found],
                                          params.nonlinear_threshold):
            return Verdict(True, evidence=False)
        extra = projection_outputs(results[4:-2], probes[4:-2])
        gap = weights_unshown(
            found[0][0], extra, params.same_atol, params.projections,
            threshold=params.nonlinear_threshold,
            weights_shown=softmax_shown(case, params.projections,
                                        params.value_layer, extra,
                                        params.output_layer))
        return Verdict(True, evidence=gap is None, unshown=gap or "")

    @staticmethod
    def _halves(out: torch.Tensor, case: Case
                ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The two [b, heads, n, n] copies of the weights in ``out``."""
        b, n = case.tensors["x"].shape[:2]
        heads = case.size("heads", 1)
        if tuple(out.shape) != (b, n, heads * 2 * n):
            return None
        halves = out.double().view(b, n, heads, 2, n).permute(3, 0, 2, 1, 4)
        return halves[0], halves[1]

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Halves equal, entries 0 or rescaled, some dropped, some kept;
        a failure with where its dropout went, when a replay proves it."""
        verdict = self._judge(check, case, results, probes)
        if verdict.ok:
            later = [results[-2], *results[1:]]
            return after_eval(verdict, lambda: self._judge(
                check, case, later, [probes[-2], *probes[1:]]),
                results[-2], results[1], WEIGHTS)
        if not results[1].ok:
            return verdict
        own, _ = returned_tensors(results[1], probes[1], None)
        found, _ = returned_tensors(results[0], probes[0], None)
        split = self._halves(own[0], case) if own else None
        if split is None or found is None:
            return verdict
        # The weights' own eval copy, and the output its own eval gives.
        return _replayed(verdict, case, found[0], [own[0], split[0]],
                         check.params.value_layer, None)

    def _judge(self, check: Check, case: Case, results: list[ProbeResult],
               probes: list[Probe]) -> Verdict:
        params = check.params
        found, problem = returned_tensors(results[0], probes[0], None)
        if found is None:
            return Verdict(False, problem, "wrong return value")
        split = self._halves(found[0], case)
        if split is None:
            b, n = case.tensors["x"].shape[:2]
            width = case.size("heads", 1) * 2 * n
            return say(Finding.WRONG_SHAPE, WEIGHTS,
                       got_shape=fmt_shape(found[0].shape),
                       want_shape=fmt_shape((b, n, width)))
        first, second = split
        p = float(case.init["dropout"])
        own, _ = returned_tensors(results[1], probes[1], None)
        rate_free, _ = returned_tensors(results[-1], probes[-1], None) \
            if results[-1].ok else (None, None)
        if own and rate_free and own[0].shape == rate_free[0].shape and \
                not close(own[0], rate_free[0], params.same_atol,
                          equal_nan=True):
            return say(Finding.EVAL_FOLLOWS_RATE, WEIGHTS, p=p,
                       eval_tip=_eval_tip(own[0], rate_free[0], p, params))
        own_split = self._halves(own[0], case) if own else None
        if own_split is not None and not close(*own_split,
                                               params.halves_atol,
                                               equal_nan=True):
            # Even in eval mode the halves differ: another unit (the heads'
            # split or merge) breaks the probe's premise and costs its own
            # item. Here only whether dropout acts in train mode is judged.
            if close(found[0], own[0], params.same_atol, equal_nan=True):
                return say(Finding.NOT_APPLIED, WEIGHTS, p=p)
            return self._evidence(results, probes, params, case)
        base = Baseline.of(
            case.tensors["attention"].view(first.shape),
            own_split[0] if own_split is not None else None)
        if not base.established:
            return no_verdict()
        clean, finite = base.clean, base.finite
        finding = base.nan_finding(first, second)
        if finding is not None:
            return say(finding, WEIGHTS)
        if close(first, clean, params.same_atol, equal_nan=True) and \
                close(second, clean, params.same_atol, equal_nan=True):
            return say(Finding.NOT_APPLIED, WEIGHTS, p=p)
        if not close(first, second, params.halves_atol, equal_nan=True):
            return say(Finding.NOT_ON_WEIGHTS, WEIGHTS)
        pattern = classify(first, clean, finite, p,
                           params.relative_tolerance, params.zero_atol)
        if pattern.kind is not Pattern.OK:
            return say(FROM_PATTERN[pattern.kind], WEIGHTS, p=p,
                       **pattern.facts())
        return self._evidence(results, probes, params, case)
