"""Every finding of the dropout kinds says what it should: each one built
from a public dropout case (the frozen eval values, a train-mode call
made to show the finding) and judged by the kind, its message pinned."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

from autograder import homework
from autograder.checks.base import Context, Verdict
from autograder.checks.kinds import kind, register_homework_kinds
from autograder.rubric import load_rubric
from autograder.sandbox.protocol import OK, ProbeResult
from autograder.values import Case, load_cases

# the attention homework's own dropout kinds (its profile's [data] kinds)
D = register_homework_kinds(homework.current())["dropout"]
RUBRIC = load_rubric()
CASES = load_cases(sets=("public",))
CTX = Context(mistake_messages={})
OTHER_RATE = 0.2     # a rate typed in instead of the module's


def item(kind_name: str, task: str):
    return next(c for t in RUBRIC.tasks if t.id == task
                for c in t.items if c.kind == kind_name)


def case_of(task: str) -> Case:
    return next(c for c in CASES if c.task == task and c.mode == "train")


def mask_like(values: torch.Tensor) -> torch.Tensor:
    """Drop every other position (some dropped, some kept)."""
    mask = torch.zeros(values.numel())
    mask[::2] = 1
    return mask.view(values.shape)


def result(*tensors: torch.Tensor) -> ProbeResult:
    return ProbeResult("p", OK, outputs=list(tensors),
                       output_kind="tuple" if len(tensors) > 1 else "tensor")


# --------------------------------------------------------------------------
# dropout_train (2.3b): att and the probabilities of one train-mode call

PROBS_CHECK = item("dropout_train", "multi_head_self_attention")
PROBS_CASE = case_of("multi_head_self_attention")
P_PROBS = float(PROBS_CASE.init["dropout"])


def weighted(probs: torch.Tensor) -> torch.Tensor:
    """att for these probabilities (the frozen value path)."""
    case = PROBS_CASE
    b, s, _ = case.tensors["x"].shape
    mix = case.tensors["value_mix"]
    return torch.einsum("bhst,bhtd->bsd", probs.reshape(
        b, mix.shape[1], s, s), mix) + case.weights["mix.bias"]


def judge_train(probs: torch.Tensor, att: torch.Tensor | None = None,
                own_att: torch.Tensor | None = None,
                own_probs: torch.Tensor | None = None,
                after_eval: tuple | None = None) -> Verdict:
    """2.3b's verdict on a train-mode call returning (att, probs), its
    eval call returning (own_att, own_probs) (default: the frozen
    ones); att defaults to the one that follows from probs; the train
    call made after an eval call returns ``after_eval`` (default: what
    the first train call returned)."""
    case = PROBS_CASE
    frozen_att, frozen = case.tensors["output"], case.tensors["attention"]
    att = weighted(probs) if att is None else att
    own = (frozen_att if own_att is None else own_att,
           frozen if own_probs is None else own_probs)
    check_kind = kind(PROBS_CHECK).impl
    probes = check_kind.case_probes(PROBS_CHECK, case)
    later = result(*(after_eval or (att, probs)))
    return check_kind.judge(PROBS_CHECK, case,
                            [result(att, probs), result(*own), result(*own),
                             later], probes, CTX)


def dropped(values: torch.Tensor, rate: float = P_PROBS) -> torch.Tensor:
    return values * mask_like(values) / (1 - rate)


def test_a_right_train_call_passes():
    assert judge_train(dropped(PROBS_CASE.tensors["attention"])).ok


def probs_situations() -> dict[D.Finding, Callable[[], Verdict]]:
    frozen = PROBS_CASE.tensors["attention"]
    frozen_att = PROBS_CASE.tensors["output"]
    right = dropped(frozen)
    wrong = right.clone()
    wrong.view(-1)[0] = frozen.view(-1)[0] * 1.5    # kept position 0
    nan = right.clone()
    nan.view(-1)[0] = float("nan")
    b, s, _ = PROBS_CASE.tensors["x"].shape
    # an eval att that does not follow from its own probabilities (a
    # wrong mix): att is then only required to change with dropout
    broken_eval = frozen_att * 3
    return {
        D.Finding.WRONG_SHAPE: lambda: judge_train(
            right[:b], att=frozen_att),
        D.Finding.NAN_IN_TRAIN: lambda: judge_train(nan),
        D.Finding.NOT_APPLIED: lambda: judge_train(frozen, att=frozen_att),
        D.Finding.UNSCALED: lambda: judge_train(frozen * mask_like(frozen)),
        D.Finding.OTHER_RATE: lambda: judge_train(
            dropped(frozen, OTHER_RATE)),
        D.Finding.WRONG_VALUES: lambda: judge_train(wrong),
        D.Finding.NONE_DROPPED: lambda: judge_train(frozen / (1 - P_PROBS)),
        D.Finding.ALL_DROPPED: lambda: judge_train(torch.zeros_like(frozen)),
        D.Finding.PROBS_NOT_DROPPED: lambda: judge_train(
            frozen, att=dropped(frozen_att)),
        D.Finding.ATT_NOT_FROM_PROBS: lambda: judge_train(
            right, att=frozen_att),
        D.Finding.ATT_DROPPED: lambda: judge_train(
            right, att=dropped(broken_eval), own_att=broken_eval),
        D.Finding.ATT_EQUALS_EVAL: lambda: judge_train(
            right, att=broken_eval, own_att=broken_eval),
        # nanoGPT's names: the mixed output went to y, att kept the weights
        D.Finding.ATT_IS_PROBS: lambda: judge_train(right, att=right.clone()),
        # The dropped rows made to sum to 1 again.
        D.Finding.RENORMALISED: lambda: judge_train(
            right / right.sum(-1, keepdim=True)),
        # Right on a new module; after an eval call, the eval values.
        D.Finding.AFTER_EVAL: lambda: judge_train(
            right, after_eval=(frozen_att, frozen)),
    }


def probs_messages() -> dict[D.Finding, tuple[str, str]]:
    p, scale = P_PROBS, 1 / (1 - P_PROBS)
    rate, factor = OTHER_RATE, 1 / (1 - OTHER_RATE)
    frozen = PROBS_CASE.tensors["attention"]
    b, s, _ = PROBS_CASE.tensors["x"].shape
    heads = frozen.shape[0] // b
    shape = f"[{b}, {s}, {s}]"
    first = float(frozen.view(-1)[0])
    return {
        D.Finding.WRONG_SHAPE: (
            f"in train mode the probabilities have shape {shape}, expected "
            f"[{b * heads}, {s}, {s}], and their head split does not give "
            f"your own eval att, so dropout cannot be checked",
            "wrong shape"),
        D.Finding.NAN_IN_TRAIN: (
            "in train mode the probabilities contain NaN or infinite "
            "values where the eval ones are finite", "NaN values"),
        D.Finding.NOT_APPLIED: (
            f"no dropout in train mode: with dropout {p:g} the "
            f"probabilities and att equal the eval ones. Apply "
            f"self.dropout to the softmax probabilities.",
            "dropout not applied"),
        D.Finding.UNSCALED: (
            f"probabilities are dropped but the kept ones are not scaled "
            f"by 1/(1 - p) = {scale:.4g}: use self.dropout (nn.Dropout "
            f"scales them for you)", "kept probabilities not rescaled"),
        D.Finding.OTHER_RATE: (
            f"in train mode the kept probabilities are their eval value "
            f"times {factor:.4g} = 1/(1 - {rate:.3g}): a dropout rate of "
            f"{rate:.3g}, not the module's {p:g} (expected 1/(1 - p) = "
            f"{scale:.4g}). Apply one dropout built from the "
            f"constructor's argument (`nn.Dropout(dropout)`), once.",
            "a dropout rate that is not the module's"),
        D.Finding.WRONG_VALUES: (
            f"in train mode 1 of {frozen.numel()} probabilities are "
            f"neither 0 nor their eval value / (1 - p), e.g.: expected 0 "
            f"or {first * scale:.6g}, got {first * 1.5:.6g}",
            "wrong train-mode probabilities"),
        D.Finding.NONE_DROPPED: (
            f"in train mode (dropout {p:g}) no probability was dropped: "
            f"apply self.dropout to the attention probabilities",
            "dropout not applied"),
        D.Finding.ALL_DROPPED: (
            f"in train mode (dropout {p:g}) every probability was dropped: "
            f"apply self.dropout to the attention probabilities",
            "dropout not applied"),
        D.Finding.PROBS_NOT_DROPPED: (
            f"probabilities not dropped out: in train mode (dropout {p:g}) "
            f"the returned probabilities equal the eval ones while att "
            f"changes: dropout is applied to the output att. Use the "
            f"probabilities after self.dropout both for the weighted sum "
            f"of the values and as the returned probs.",
            "probabilities not dropped out"),
        D.Finding.ATT_NOT_FROM_PROBS: (
            "att doesn't follow from the returned probabilities: att "
            "equals the eval output, so att was computed from the "
            "probabilities before dropout. Use the dropped-out "
            "probabilities for the weighted sum of the values and return "
            "those same probabilities.",
            "att does not follow from the probabilities"),
        D.Finding.ATT_DROPPED: (
            f"dropout is applied to the output att (in train mode, dropout "
            f"{p:g}, every value of att is 0 or its eval value / (1 - p)). "
            f"Use the dropped-out probabilities for the weighted sum of the "
            f"values.", "probabilities not dropped out"),
        D.Finding.ATT_EQUALS_EVAL: (
            "att equals the eval output, so att was computed from the "
            "probabilities before dropout. Use the dropped-out "
            "probabilities for the weighted sum of the values.",
            "att does not follow from the probabilities"),
        D.Finding.ATT_IS_PROBS: (
            "the returned att holds the same numbers as the returned "
            "probabilities: att is the attention weights, not their "
            "weighted sum of the values. Return the output (the weighted "
            "sum, heads merged and mixed) as att.",
            "att is the probabilities"),
        D.Finding.RENORMALISED: (
            f"in train mode (dropout {p:g}) the kept probabilities of each "
            f"row are their eval values times one factor of that row, and "
            f"every row sums to 1: the rows are rescaled to sum to 1 after "
            f"dropout. Dropout keeps each at its eval value / (1 - p), and "
            f"the rows then need not sum to 1: use self.dropout's output "
            f"as it is.", "rows rescaled to sum to 1 after dropout"),
        D.Finding.AFTER_EVAL: (
            f"dropout is right in train mode on a new module, but not once "
            f"the module has made a call in eval mode: then no dropout in "
            f"train mode: with dropout {p:g} the probabilities and att "
            f"equal the eval ones. Apply self.dropout to the softmax "
            f"probabilities. An eval call must leave the module as "
            f"`__init__` made it (`model.eval()` and `model.train()` "
            f"already switch dropout off and on).",
            "dropout wrong in train mode after an eval call"),
    }


@pytest.mark.parametrize("finding", list(probs_situations()),
                         ids=lambda f: f.name)
def test_each_probabilities_finding_says_its_message(finding):
    verdict = probs_situations()[finding]()
    assert not verdict.ok
    assert (verdict.message, verdict.short) == probs_messages()[finding]


def test_where_and_how_say_the_other_places():
    # PROBS_NOT_DROPPED's and ATT_NOT_FROM_PROBS's second wording: att
    # changed, but not by dropout on att itself, and not to the eval att.
    frozen = PROBS_CASE.tensors["attention"]
    elsewhere = PROBS_CASE.tensors["output"] * 1.1
    not_dropped = judge_train(frozen, att=elsewhere)
    assert not_dropped.message.endswith(
        "while att changes: dropout is applied somewhere else (to the "
        "values, to the output, or to a copy of the probabilities while "
        "the ones before dropout are returned). Use the probabilities "
        "after self.dropout both for the weighted sum of the values and "
        "as the returned probs.")
    not_from = judge_train(dropped(frozen), att=elsewhere)
    assert not_from.message == (
        "att doesn't follow from the returned probabilities: dropout "
        "applied after (or before) the weighted sum, or the returned "
        "probabilities are not the ones used. Use the dropped-out "
        "probabilities for the weighted sum of the values and return "
        "those same probabilities.")


# --------------------------------------------------------------------------
# dropout_on_weights (3.1d, 3.3d): the probe's output [A | A] per head

WEIGHTS_CHECK = item("dropout_on_weights", "causal_attention")
WEIGHTS_CASE = case_of("causal_attention")
P_WEIGHTS = float(WEIGHTS_CASE.init["dropout"])


def side_by_side(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The probe's output for a single head whose value halves give
    ``first`` and ``second`` (each [b, n, n])."""
    return torch.cat([first, second], dim=-1)


def judge_weights(first: torch.Tensor, second: torch.Tensor | None = None,
                  own: torch.Tensor | None = None,
                  rate_free: torch.Tensor | None = None,
                  after_eval: torch.Tensor | None = None) -> Verdict:
    """``rate_free``: the eval output of the module built with dropout 0
    (the last probe; default: ``own``); ``after_eval``: the train call's
    output after an eval call (the probe before it; default: the first
    train call's)."""
    case = WEIGHTS_CASE
    frozen = case.tensors["attention"]
    train = side_by_side(first, first if second is None else second)
    own = side_by_side(frozen, frozen) if own is None else own
    check_kind = kind(WEIGHTS_CHECK).impl
    probes = check_kind.case_probes(WEIGHTS_CHECK, case)
    results = [result(train)] + [result(own)] * (len(probes) - 3) + [
        result(train if after_eval is None else after_eval),
        result(own if rate_free is None else rate_free)]
    return check_kind.judge(WEIGHTS_CHECK, case, results, probes, CTX)


def weights_situations() -> dict[D.Finding, Callable[[], Verdict]]:
    frozen = WEIGHTS_CASE.tensors["attention"]
    right = dropped(frozen, P_WEIGHTS)
    wrong = right.clone()
    wrong.view(-1)[0] = frozen.view(-1)[0] * 1.5
    nan = right.clone()
    nan.view(-1)[0] = float("nan")
    return {
        D.Finding.WRONG_SHAPE: lambda: judge_weights(right[..., :-1]),
        D.Finding.NAN_IN_TRAIN: lambda: judge_weights(nan),
        D.Finding.NOT_APPLIED: lambda: judge_weights(frozen),
        D.Finding.NOT_ON_WEIGHTS: lambda: judge_weights(
            right, right.flip(-1)),
        D.Finding.UNSCALED: lambda: judge_weights(
            frozen * mask_like(frozen)),
        D.Finding.OTHER_RATE: lambda: judge_weights(
            dropped(frozen, OTHER_RATE)),
        D.Finding.WRONG_VALUES: lambda: judge_weights(wrong),
        D.Finding.NONE_DROPPED: lambda: judge_weights(
            frozen / (1 - P_WEIGHTS)),
        D.Finding.ALL_DROPPED: lambda: judge_weights(
            torch.zeros_like(frozen)),
        # Weights times 1 - p in both modes: train mode is eval mode
        # dropped out and rescaled, but the eval output follows p.
        D.Finding.EVAL_FOLLOWS_RATE: lambda: judge_weights(
            right * (1 - P_WEIGHTS),
            own=side_by_side(frozen, frozen) * (1 - P_WEIGHTS),
            rate_free=side_by_side(frozen, frozen)),
        D.Finding.AFTER_EVAL: lambda: judge_weights(
            right, after_eval=side_by_side(frozen, frozen)),
    }


def weights_messages() -> dict[D.Finding, tuple[str, str]]:
    p, scale = P_WEIGHTS, 1 / (1 - P_WEIGHTS)
    rate, factor = OTHER_RATE, 1 / (1 - OTHER_RATE)
    b, n = WEIGHTS_CASE.tensors["x"].shape[:2]
    first = float(WEIGHTS_CASE.tensors["attention"].view(-1)[0])
    return {
        D.Finding.WRONG_SHAPE: (
            f"in train mode the output has shape [{b}, {n}, {2 * n - 2}], "
            f"expected [{b}, {n}, {2 * n}]", "wrong shape"),
        D.Finding.NAN_IN_TRAIN: (
            "in train mode the output contains NaN or infinite values "
            "where the eval output is finite", "NaN values"),
        D.Finding.NOT_APPLIED: (
            f"no dropout in train mode: with dropout {p:g} the output "
            f"equals the eval output. Apply self.dropout to the attention "
            f"weights.", "dropout not applied"),
        D.Finding.NOT_ON_WEIGHTS: (
            "dropout is applied elsewhere than to the attention weights (in "
            "train mode the probe's two copies of the weights are dropped "
            "out differently): apply self.dropout to the softmax weights, "
            "then multiply by the values.", "dropout not on the weights"),
        D.Finding.UNSCALED: (
            f"weights are dropped but the kept ones are not scaled by "
            f"1/(1 - p) = {scale:.4g}: use self.dropout",
            "kept weights not rescaled"),
        D.Finding.OTHER_RATE: (
            f"in train mode the kept weights are their eval value times "
            f"{factor:.4g} = 1/(1 - {rate:.3g}): a dropout rate of "
            f"{rate:.3g}, not the module's {p:g} (expected 1/(1 - p) = "
            f"{scale:.4g}). Apply one dropout built from the constructor's "
            f"argument (`nn.Dropout(dropout)`), once.",
            "a dropout rate that is not the module's"),
        D.Finding.WRONG_VALUES: (
            "in train mode the attention weights are neither 0 nor their "
            "eval value / (1 - p)", "wrong train-mode weights"),
        D.Finding.NONE_DROPPED: (
            f"in train mode (dropout {p:g}) no weight was dropped: apply "
            f"self.dropout to the attention weights", "dropout not applied"),
        D.Finding.ALL_DROPPED: (
            f"in train mode (dropout {p:g}) every weight was dropped: apply "
            f"self.dropout to the attention weights", "dropout not applied"),
        D.Finding.EVAL_FOLLOWS_RATE: (
            f"in eval mode the output has other values with dropout {p:g} "
            f"than with dropout 0: in eval mode dropout does nothing, "
            f"whatever its rate. Scale nothing by (1 - p): your eval "
            f"weights are the rate-free ones times 1 - p, and self.dropout "
            f"already scales the kept weights by 1/(1 - p) in train mode.",
            "the eval output depends on the dropout rate"),
        D.Finding.AFTER_EVAL: (
            f"dropout is right in train mode on a new module, but not once "
            f"the module has made a call in eval mode: then no dropout in "
            f"train mode: with dropout {p:g} the output equals the eval "
            f"output. Apply self.dropout to the attention weights. An eval "
            f"call must leave the module as `__init__` made it "
            f"(`model.eval()` and `model.train()` already switch dropout "
            f"off and on).", "dropout wrong in train mode after an eval "
            "call"),
    }


@pytest.mark.parametrize("finding", list(weights_situations()),
                         ids=lambda f: f.name)
def test_each_weights_finding_says_its_message(finding):
    verdict = weights_situations()[finding]()
    assert not verdict.ok
    assert (verdict.message, verdict.short) == weights_messages()[finding]


def test_a_nudged_copy_of_the_eval_values_is_no_dropout_after_eval():
    """After an eval call, train values that are the eval ones nudged
    (times 1 + 4e-6, past an equality test's tolerance) are judged as a
    new module's train call is: no dropout, not "different from eval"."""
    frozen = PROBS_CASE.tensors["attention"]
    frozen_att = PROBS_CASE.tensors["output"]
    right = dropped(frozen)
    verdict = judge_train(right, after_eval=(frozen_att * (1 + 4e-6),
                                             frozen * (1 + 4e-6)))
    assert not verdict.ok and verdict.short == \
        "dropout wrong in train mode after an eval call"
    weights = WEIGHTS_CASE.tensors["attention"]
    nudged = side_by_side(weights, weights) * (1 + 4e-6)
    verdict = judge_weights(dropped(weights, P_WEIGHTS), after_eval=nudged)
    assert not verdict.ok


def test_an_eval_call_that_changes_the_eval_output_is_not_charged_here():
    """A warm-up that changed the module's eval output too (a mask scaled
    in place: its repeated eval call is far from a new module's) is the
    eval items' second call to charge: the dropout item stays with the new
    module's train call."""
    weights = WEIGHTS_CASE.tensors["attention"]
    right = dropped(weights, P_WEIGHTS)
    check_kind = kind(WEIGHTS_CHECK).impl
    probes = check_kind.case_probes(WEIGHTS_CHECK, WEIGHTS_CASE)
    own = side_by_side(weights, weights)
    train = side_by_side(right, right)
    warm = result(own)
    warm.repeat = [own * 3]
    results = [result(train)] + [result(own)] * (len(probes) - 3) + [
        warm, result(own)]
    assert check_kind.judge(WEIGHTS_CHECK, WEIGHTS_CASE, results, probes,
                            CTX).ok
    warm.repeat = [own.clone()]        # the control: no drift, charged
    assert not check_kind.judge(WEIGHTS_CHECK, WEIGHTS_CASE, results,
                                probes, CTX).ok


def test_every_finding_is_pinned():
    pinned = set(probs_situations()) | set(weights_situations())
    assert set(D.Finding) - pinned == set(), (
        "a finding without a situation here: add one and its message")


# --------------------------------------------------------------------------
# No verdict where the baseline cannot be established: the submission's own
# eval values NaN everywhere (another unit's bug, e.g. a mask of ints that
# hides every key) cost that unit's items, not dropout's too.

def test_eval_values_nan_everywhere_give_no_verdict():
    frozen = PROBS_CASE.tensors["attention"]
    nan_probs = torch.full_like(frozen, float("nan"))
    train = judge_train(nan_probs, att=torch.full_like(
        PROBS_CASE.tensors["output"], float("nan")), own_probs=nan_probs)
    assert train.ok and not train.evidence
    weights = WEIGHTS_CASE.tensors["attention"]
    nan_out = torch.full((*weights.shape[:2], 2 * weights.shape[2]),
                         float("nan"))
    on_weights = judge_weights(nan_out[..., :weights.shape[2]],
                               nan_out[..., weights.shape[2]:], own=nan_out)
    assert on_weights.ok and not on_weights.evidence
    # Control: a finite baseline still judges (a right call passes with
    # its evidence, a wrong one fails).
    assert judge_train(dropped(frozen)).ok
    assert not judge_train(frozen * mask_like(frozen)).ok


def test_an_item_of_no_verdicts_only_earns_nothing():
    # Every case without a verdict: the item needs one case that shows
    # dropout (CaseCheck.no_evidence), so no point without work.
    check_kind = kind(PROBS_CHECK).impl
    probes = check_kind.case_probes(PROBS_CHECK, PROBS_CASE)
    nan = torch.full_like(PROBS_CASE.tensors["attention"], float("nan"))
    nan_att = torch.full_like(PROBS_CASE.tensors["output"], float("nan"))
    results = {p.id: result(nan_att, nan) for p in probes}
    outcome = check_kind.evaluate(PROBS_CHECK, None, [PROBS_CASE], results,
                                  CTX)
    assert not outcome.passed and outcome.points == 0


def test_a_rate_applied_twice_is_said_so_not_typed_in():
    """Dropout applied twice (eval33 s16): the kept weights scaled by
    (1/(1 - p))^2, which the module's rate applied twice gives; the
    message says so and never that a number was typed in."""
    frozen = WEIGHTS_CASE.tensors["attention"]
    twice = dropped(dropped(frozen, P_WEIGHTS), P_WEIGHTS)
    verdict = judge_weights(twice)
    assert f"the module's {P_WEIGHTS:g} applied 2 times gives this" in \
        verdict.message
    assert "typed in" not in verdict.message
    other = judge_weights(dropped(frozen, OTHER_RATE))
    assert "times gives this" not in other.message, other.message


@pytest.mark.parametrize("own,tip", [
    (lambda f: f * (1 - P_WEIGHTS), "Scale nothing by (1 - p)"),
    (lambda f: dropped(f, P_WEIGHTS), "dropped out in eval mode too"),
    (lambda f: f + 0.01, None)])
def test_the_eval_tip_is_only_what_the_eval_values_prove(own, tip):
    """The eval output moves with p: (1 - p) in both modes is said only
    when the eval values are the rate-free ones times 1 - p; dropout on
    in eval mode (a fresh nn.Dropout in forward, eval33 s06) only when
    they are dropped out; else no tip."""
    frozen = WEIGHTS_CASE.tensors["attention"]
    rate_free = side_by_side(frozen, frozen)
    verdict = judge_weights(dropped(frozen, P_WEIGHTS),
                            own=own(rate_free), rate_free=rate_free)
    assert "in eval mode the output has other values" in verdict.message
    tips = ("Scale nothing by (1 - p)", "dropped out in eval mode too")
    assert [t for t in tips if t in verdict.message] == \
        ([tip] if tip else [])
