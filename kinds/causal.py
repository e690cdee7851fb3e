"""The causal property (Task 3.1c, ``causal_property``, the attention
homework's own kind): changing future tokens changes no earlier output
(every position is checked against the change of all the tokens after
it: a mask hiding only the last token fails), and attention weights
computed from the queries and keys.

It needs no expected values: causality is a property of the student's own
outputs, judged in the grading parent; the worker only runs the calls.
The evidence that weights follow the projections (zeroed, shifted) and
depend on the input is this homework's shared evidence (``projections.py``).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

import torch

from autograder import probes as P
from autograder.checks.base import CaseCheck, Context, Verdict
from autograder.checks.compare import fmt_shape
from autograder.checks.entries import Check
from autograder.checks.outputs import returned_tensors
from autograder.checks.registry import register
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.values import Case

from .attention_weights import softmax_shown
from .projections import (NOT_FINITE, case_generator, differs, nonlinear,
                          projection_outputs, projection_probes,
                          valid_projections, weights_unshown)


def random_tokens(x: torch.Tensor, generator: torch.Generator | None = None
                  ) -> torch.Tensor:
    """Tokens of ``x``'s shape drawn at random, on ``x``'s scale: what a
    changed token becomes (no fixed map of the old one, which a leak
    through a quantity the map keeps would pass)."""
    scale = float(x.double().std()) if x.numel() > 1 else 1.0
    scale = scale if math.isfinite(scale) and scale > 0 else 1.0
    drawn = torch.randn(x.shape, generator=generator, dtype=torch.float64)
    return (drawn * scale).to(x.dtype)


def changed_last_token(x: torch.Tensor, new: torch.Tensor | None = None
                       ) -> torch.Tensor:
    """``x`` with its last token replaced by that of ``new`` (default:
    tokens drawn at random)."""
    new = random_tokens(x) if new is None else new
    changed = x.clone()
    changed[:, -1] = new[:, -1]
    return changed


def changed_after(x: torch.Tensor, position: int,
                  new: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` with every token after ``position`` replaced by ``new``'s
    (default: tokens drawn at random)."""
    new = random_tokens(x) if new is None else new
    changed = x.clone()
    changed[:, position + 1:] = new[:, position + 1:]
    return changed


def changed_first_token(x: torch.Tensor, step: torch.Tensor,
                        times: int = 1) -> torch.Tensor:
    """``x`` with its first token moved ``times`` times by ``step`` (a
    [b, d_in] vector): once and twice give three inputs on a line."""
    changed = x.clone()
    changed[:, 0] = x[:, 0] + times * step
    return changed


def _process(label: str, train: bool) -> int:
    """The worker process of a causal call (``Probe.process``): a changed
    call never shares one with the plain call it is compared with, nor
    with its twin of the other mode (the same input); changed calls share
    theirs, which holds no token the plain call has beyond theirs (the
    first-token calls, which hold the last token, stay with the plain
    call). Four processes, whatever the number of tokens."""
    changed = label not in ("plain", "first", "first-twice")
    return 1 + 2 * train + changed


@dataclass(frozen=True)
class CausalPropertyParams:
    """The query and key projections' attribute names (zeroed in turn:
    weights computed from them move), and ``nonlinear``'s threshold: the
    evidence of weights computed from the input (a future token's change
    is judged with the item's atol)."""

    projections: list[str]
    nonlinear_threshold: float = 1e-4
    # The value layer's attribute name: set through the probe's state so
    # that a call's output is the attention weights, judged a softmax of
    # the scores (attention_weights.py; "": not judged).
    value_layer: str = ""

    def __post_init__(self) -> None:
        valid_projections(self.projections)
        if self.value_layer:
            valid_projections([self.value_layer])


@register("item", "causal_property", uses_cases=True,
          params=CausalPropertyParams)
class CausalProperty(CaseCheck):
    """Changing a future token changes no earlier output, and the outputs
    mix positions as attention does: changing the first token changes a
    later output (a constant or a per-position function earns nothing),
    and not in proportion to the change (weights computed from the input:
    uniform or other fixed weights earn nothing)."""

    no_evidence = ("later outputs change in proportion to the first token "
                   "(moving it twice by the same step changes them twice "
                   "by the same amount), or do not change when the query "
                   "or the key projection's weights are zeroed, in every "
                   "case: the attention weights do not depend on the "
                   "input through the queries and keys. Compute them from "
                   "the queries and keys, "
                   "softmax(q k^T / sqrt(d_k)) with the future masked, not "
                   "as fixed (e.g. uniform) weights")
    unshown = ("no case shows the attention weights computed from the "
               "queries and keys, which this item needs to credit "
               "causality: {facts}. That does not show that your weights "
               "ignore the queries and keys; the feedback on this task's "
               "output says where your values leave the reference")

    # Its cases' modules are causal: their module probes' longer call
    # must keep the second call's outputs (grade.plan_checks).
    judges_causality = True

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """The case's call; the same call with the last token changed,
        with every token after each earlier position changed (each in
        eval and, seeded alike, in train mode: a mask applied in one mode
        only fails), and with the first token moved once and twice by one
        step; then ``projection_probes``. The changed tokens are drawn at
        random per case; each causal call runs on a fresh import of the
        submission (``Probe.fresh``: no state shared with another call),
        in an order drawn per case, and in a process apart from the calls
        it is compared with (``Probe.process``: the plain calls of each
        mode, the first-token ones with eval's, and the changed calls of
        each mode, four processes in all): state kept outside the module
        survives a fresh import, never another process."""
        x = case.tensors["x"]
        new = random_tokens(x, case_generator(case, "tokens"))
        step = random_tokens(x[:, 0], case_generator(case, "first-step"))
        calls: list[tuple[str, torch.Tensor, bool]] = []
        for train in (False, True):
            calls += [("plain", x, train), ("last", changed_last_token(
                x, new), train)]
            calls += [(f"after-{p}", changed_after(x, p, new), train)
                      for p in range(x.shape[1] - 2)]
        calls += [("first", changed_first_token(x, step), False),
                  ("first-twice", changed_first_token(x, step, 2), False)]
        found = []
        for label, args, train in calls:
            probe = P.case_probe(case, train=train, timeout=check.timeout)
            mode = "train" if train else "eval"
            probe = replace(probe, id=f"{case.name}:causal:{mode}:{label}",
                            args=[args], fresh=True,
                            seed=case.seed if train else None,
                            process=_process(label, train))
            found.append(probe)
        random.Random(case_generator(case, "order").initial_seed()
                      ).shuffle(found)
        return found + projection_probes(case, check.timeout,
                                         check.params.projections,
                                         check.params.value_layer)

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Every position keeps its output when the tokens after it
        change, in eval and in train mode; some later position changes
        with the first token; the weights are attention's."""
        params = check.params
        zeroing = len(projection_probes(case, check.timeout,
                                        params.projections,
                                        params.value_layer))
        causal = len(probes) - zeroing
        got: dict[str, torch.Tensor] = {}
        for result, probe in zip(results[:causal], probes[:causal]):
            found, problem = returned_tensors(result, probe, None)
            if found is None:
                return Verdict(False, problem, "wrong return value")
            got[probe.id.split(":causal:", 1)[1]] = found[0]
        extra = projection_outputs(results[causal:], probes[causal:])
        before = got["eval:plain"]
        if before.dim() != 3 or any(o.shape != before.shape
                                    for o in got.values()):
            shapes = sorted({fmt_shape(o.shape) for o in got.values()})
            return Verdict(False, f"forward returned shapes "
                           f"{', '.join(shapes)}, expected [b, num_tokens, "
                           f"{case.argument('width')}] every time",
                           "wrong shape")
        if before.shape[1] < 2:
            return Verdict(True, evidence=False)   # one token shows nothing
        if before.numel() and not bool(torch.isfinite(before).any()):
            # NaN everywhere compares equal to NaN everywhere: no change
            # of a token shows anything, and no cause is proven here
            return Verdict(False, f"{NOT_FINITE}, so no change of a token "
                           f"can show which tokens an output depends on; "
                           f"the feedback on this task's output says where "
                           f"your values leave the reference",
                           "output not finite")
        for mode in ("eval", "train"):
            plain = got[f"{mode}:plain"]
            changes = [(before.shape[1] - 2, got[f"{mode}:last"])]
            changes += [(p, got[f"{mode}:after-{p}"])
                        for p in range(before.shape[1] - 2)]
            for position, changed in changes:
                diff = differs(plain[:, :position + 1],
                               changed[:, :position + 1], check.atol)
                if bool(diff.any()):
                    where = int(diff.any(dim=2).any(dim=0).nonzero()[0])
                    what = "only the last token" if \
                        position == before.shape[1] - 2 else \
                        f"the tokens after position {position} (and no " \
                        f"other)"
                    return Verdict(
                        False, f"changing {what} changed the output at "
                        f"earlier position {where} in {mode} mode: earlier "
                        f"tokens can see the future. An output may depend "
                        f"only on the tokens up to its own position: the "
                        f"causal mask hides every key after the query "
                        f"(the whole upper triangle of the [query, key] "
                        f"scores, cut to num_tokens) before the softmax, "
                        f"in every mode.",
                        "a future token changed an earlier output")
        first, twice = got["eval:first"], got["eval:first-twice"]
        if not bool(differs(before[:, 1:], first[:, 1:], check.atol).any()):
            return Verdict(False, "changing the first token changed no "
                           "later output: in causal attention every token "
                           "attends to the first one, so its output "
                           "depends on it. Compute the attention weights "
                           "over the earlier tokens and return their "
                           "weighted sum of the values.",
                           "outputs do not mix positions")
        if not nonlinear([before[:, 1:], first[:, 1:], twice[:, 1:]],
                         params.nonlinear_threshold):
            return Verdict(True, evidence=False)
        gap = weights_unshown(
            before, extra, check.atol, params.projections, softmax=True,
            threshold=params.nonlinear_threshold,
            weights_shown=softmax_shown(case, params.projections,
                                        params.value_layer, extra))
        return Verdict(True, evidence=gap is None, unshown=gap or "")
