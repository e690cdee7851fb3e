"""Value kinds: compare what the student's modules return (an output, the
linear layers it builds) with the frozen values, and explain the
differences. Also the second calls (``Probe.again``) every kind that
reads a call's output may judge.

Each class is a check kind registered by name for ``rubric.toml``. ``plan``
lists the probes an item needs; ``evaluate`` judges their results (in the
grading parent, against tensors that never reach the worker).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from autograder.text import mdsafe
from autograder import probes as P
from autograder.checks.compare import close, compare
from autograder.sandbox.protocol import (FRESH_RAISES, MEMORY, Probe,
                                         ProbeResult)
from autograder.checks.entries import Check, Outcome, Task
from autograder.checks.registry import register
from autograder.checks.base import FAIL, PASS, CaseCheck, Context, Verdict
from autograder.checks.outputs import (diagnose, mistake_tensors,
                                       returned_tensors)
from autograder.values import Case


# --------------------------------------------------------------------------
# Kinds

@dataclass(frozen=True)
class LinearAttributesParams:
    """The attributes inspected, the constructor arguments, and which of
    them are the expected in and out sizes (the homework's own argument
    names: no default)."""

    attributes: list
    init: dict
    in_features: str
    out_features: str


@register("item", "linear_attributes", params=LinearAttributesParams)
class LinearAttributes:
    """Attributes that must be nn.Linear(in, out) with bias (inspected
    after construction, no forward call)."""

    def _probe(self, check: Check, task: Task) -> Probe:
        return P.inspect_probe(task.cls, check.params.init)

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """One inspect probe."""
        return [self._probe(check, task)]

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Every listed attribute a Linear of the right sizes with bias."""
        probe = self._probe(check, task)
        result = results[probe.id]
        if not result.ok:
            return Outcome(0.0, False,
                           [f"- {FAIL} {P.failure_text(result, probe)}"],
                           not_implemented=P.is_not_implemented(result))
        init = check.params.init
        want_in = init[check.params.in_features]
        want_out = init[check.params.out_features]
        lines, passed = [], True
        made = f"{task.cls}({', '.join(f'{k}={v}' for k, v in init.items())})"
        for name in check.params.attributes:
            found = result.attributes.get(name)
            if found is None:
                problem = f"{made} has no attribute `{name}`"
            elif "in_features" not in found:
                # the type's __name__ is the student's: escaped
                kind = mdsafe.code_span(found.get("type"), 100)
                problem = (f"`self.{name}` is a {kind}, expected"
                           f" nn.Linear({want_in}, {want_out})")
            elif (found["in_features"], found["out_features"]) != \
                    (want_in, want_out):
                got_in, got_out = (mdsafe.inline(found[k], 40) for k in
                                   ("in_features", "out_features"))
                problem = (f"`self.{name}` is nn.Linear("
                           f"{got_in}, {got_out})"
                           f" in {made}, expected nn.Linear({want_in}, "
                           f"{want_out}) ({check.params.in_features} -> "
                           f"{check.params.out_features})")
            elif not found.get("bias"):
                problem = (f"`self.{name}` has no bias: keep nn.Linear's "
                           f"default bias=True")
            else:
                lines.append(f"- {PASS} `self.{name}` is nn.Linear({want_in}, "
                             f"{want_out}) with bias")
                continue
            passed = False
            lines.append(f"- {FAIL} {problem}")
        return Outcome(check.points if passed else 0.0, passed, lines)


@dataclass(frozen=True)
class ModuleOutputParams:
    """Which calls are compared: with ``return_attention=True`` (its
    first output), and then also the plain call."""

    return_attention: bool = False
    also_plain_call: bool = False


@register("item", "module_output", uses_cases=True, explains_crashes=True,
          params=ModuleOutputParams)
class ModuleOutput(CaseCheck):
    """forward's output (item 0 with return_attention) vs ``output``."""

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """The call (with return_attention if asked), and the plain call."""
        train = check.run_mode == "train"
        found = []
        if check.params.return_attention:
            found.append(P.case_probe(case, train=train,
                                      kwargs={"return_attention": True},
                                      again=True))
        if not found or check.params.also_plain_call:
            found.append(P.case_probe(case, train=train, again=True))
        if case.mode == "train" and not train:
            # Eval after train: the train-mode call of the dropout item
            # (same probe), whose second call is in eval mode.
            found.append(P.case_probe(case, train=True,
                                      kwargs=found[0].kwargs, again=True))
        return found

    def required(self, check: Check, case: Case,
                 probes: list[Probe]) -> int | None:
        """The eval calls; a train-mode call that fails is the dropout
        item's to judge (only its eval second call is this item's)."""
        return sum(not p.train for p in probes) \
            if check.run_mode != "train" else None

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Compare each call's output with the frozen output, then each
        second call (``Probe.again``): the same module called again on the
        same input, in eval mode (after the train-mode call too), must
        give it again."""
        expected = case.tensors["output"]
        mistakes = mistake_tensors(case, "output")
        train_first = check.run_mode == "train"
        for result, probe in zip(results, probes):
            if probe.train and not train_first:
                continue
            tuple_call = bool(probe.kwargs.get("return_attention"))
            outputs, problem = returned_tensors(result, probe,
                                                2 if tuple_call else None)
            if outputs is None:
                return Verdict(False, problem, "wrong return value")
            verdict = diagnose(outputs[0], expected, mistakes, ctx, check,
                               _output_words(case, probe))
            if not verdict.ok:
                return _not_deterministic(verdict, outputs[0], result, probe,
                                          ctx)
        for result, probe in zip(results, probes):
            if result.ok:
                verdict = second_call(case, result, probe, expected, check)
                if verdict is not None:
                    return verdict
        return Verdict(True)


def _output_words(case: Case, probe: Probe) -> str:
    if probe.kwargs.get("return_attention") or \
            case.size("heads") is not None:
        return f"`att` from {P.call_text(probe)}"
    return f"the output of {P.call_text(probe)}"


# --------------------------------------------------------------------------
# Second calls (Probe.again)

NEW = " (new)"   # worker.changed_state's mark of an attribute it created


def again_att(result: ProbeResult, probe: Probe
              ) -> tuple[torch.Tensor | None, str]:
    """The first output of the probe's second call, back in the first
    call's batch order; or None and what went wrong ("" if there was no
    second call)."""
    again = result.again
    if again is None or _out_of_room(again):
        return None, ""
    plain = replace(probe, train=False)
    if not again.ok:
        return None, P.failure_text(again, plain)
    outputs, problem = returned_tensors(again, plain, 2 if probe.kwargs.get(
        "return_attention") else None)
    if outputs is None:
        return None, problem
    att = outputs[0]
    return (att.flip(0) if att.dim() else att), ""


def _out_of_room(again: ProbeResult) -> bool:
    """A second call stopped by the worker's own limits (memory, the size
    of its output file: code that prints megabytes fills it twice as
    fast): no verdict on state, the first call was judged."""
    return again.status == MEMORY or (again.exception == "OSError" and
                                      "File too large" in again.message)


def _differs(other: torch.Tensor, first: torch.Tensor, atol: float) -> bool:
    return tuple(other.shape) != tuple(first.shape) or \
        not close(other, first, atol, equal_nan=True)


def eval_differs(result: ProbeResult, probe: Probe, first: torch.Tensor,
                 atol: float) -> bool:
    """Whether an eval probe's same-order repeat (``ProbeResult.repeat``)
    gives another output than its first call (beyond ``atol``; NaN equals
    NaN): nondeterminism in eval mode or state kept between calls. Code
    that mixes batch elements repeats itself here (see
    ``batch_dependent``)."""
    if probe.train or not result.repeat:
        return False
    return _differs(result.repeat[0], first, atol)


def batch_dependent(result: ProbeResult, probe: Probe, first: torch.Tensor,
                    atol: float) -> bool:
    """Whether an eval probe's output for one batch element changes with
    the others: the second call (the batch reversed) differs from the
    first while the same-order repeat gives it again."""
    if probe.train or not result.repeat or \
            eval_differs(result, probe, first, atol):
        return False
    att, _ = again_att(result, probe)
    return att is not None and _differs(att, first, atol)


def _state_words(changed: list[str]) -> str:
    if not changed:
        # A fact, no guess at where else state may be kept.
        return ("None of its buffers, parameters or attributes changed "
                "between the calls.")
    created = [n.removesuffix(NEW) for n in changed if n.endswith(NEW)]
    kept = [n for n in changed if not n.endswith(NEW)]
    said = []
    if created:
        # A fact: the attribute did not exist after __init__. A cache
        # kept from an earlier input, whatever the code holds in it.
        names = ", ".join(mdsafe.code_span(f"self.{n}") for n in created)
        said.append(f"The first call created {names}, kept on the "
                    f"module for the calls after it: a value made from an "
                    f"earlier input. Make it for each input (or for the "
                    f"longest one, in `__init__`).")
    if kept:
        names = ", ".join(mdsafe.code_span(f"self.{n}") for n in kept)
        said.append(f"The first call changed {names}: likely an in-place "
                    f"change of a buffer or attribute (`self.mask *= ...`, "
                    f"`masked_fill_` on `self.mask`, an attribute that "
                    f"accumulates). Compute new tensors (`masked_fill`, not "
                    f"`masked_fill_`) and leave the module's state as "
                    f"`__init__` made it.")
    return " ".join(said)


def second_call(case: Case, result: ProbeResult, probe: Probe,
                expected: torch.Tensor, check: Check) -> Verdict | None:
    """The verdict on a probe's second call against ``expected`` (None
    if it gives it, or there was none). An eval probe's second call is its
    same-order repeat (``ProbeResult.repeat``), then the call with the
    batch reversed: state that flips on each call (a mask inverted in
    place) is right again on the third and shows only on the repeat."""
    att, problem = again_att(result, probe)
    if att is None and not problem:
        return None
    call = P.call_text(replace(probe, train=False))
    before = (f"after a call in train mode, {call} in eval mode" if
              probe.train else f"{call} is right the first time, but the "
                               f"same module called again")
    how = "on the same input (in eval mode, the batch in reverse order)"
    repeat = result.repeat[0] if result.repeat and not probe.train else None
    again = compare(repeat, expected, atol=check.atol, rtol=check.rtol,
                    what="`att` of the second call") \
        if repeat is not None else None
    if again is not None and not again.ok:
        att, problem = None, again.message
        how = "on the same input (in eval mode, in the same order)"
    if att is not None:
        found = compare(att, expected, atol=check.atol, rtol=check.rtol,
                        what="`att` of the second call")
        if found.ok:
            longer = result.again
            if longer is None or longer.phase != "longer":
                return None
            # Right on the same input, wrong on a longer one
            # (Probe.again_longer): a mask or cache sized by the first call.
            how, problem = "on a longer input", mdsafe.inline(
                longer.message)
            if longer.message.endswith(FRESH_RAISES):
                # No state: a new module raises there too.
                return Verdict(False, f"{call} in eval mode on a longer "
                               f"input: {problem}.",
                               "raises on a longer input")
        else:
            problem = found.message
    return Verdict(False, f"the second call differs: {before} {how} "
                   f"gives another result: {problem}. "
                   f"{_state_words(result.changed)}",
                   "the second call differs (state kept between calls)")


def _not_deterministic(verdict: Verdict, first: torch.Tensor,
                       result: ProbeResult, probe: Probe,
                       ctx: Context) -> Verdict:
    """A wrong eval output whose repeat differs, with no state changed
    that was there before (randomness in eval mode, most likely dropout
    left on), or whose batch reversed gives another output for the same
    element while the repeat does not (batch elements mixed). Say what
    was seen instead of a catalogue mistake."""
    kept = [n for n in result.changed if not n.endswith(NEW)]
    if kept:
        return verdict
    call = P.call_text(probe)
    if eval_differs(result, probe, first, ctx.mistake_atol):
        return Verdict(False, f"your eval-mode output is not repeatable: "
                       f"two eval-mode calls of {call}, one after the "
                       f"other on the same input in the same order, give "
                       f"different outputs. In eval mode nothing may be "
                       f"random: dropout must follow the module's mode "
                       f"(an `nn.Dropout` built in `__init__`, "
                       f"`F.dropout(..., training=self.training)`, "
                       f"`dropout_p=p if self.training else 0.0` in "
                       f"`F.scaled_dot_product_attention`), and a module "
                       f"built without a dropout rate drops nothing. "
                       f"(First call: {verdict.message})",
                       "eval-mode output not repeatable")
    if batch_dependent(result, probe, first, ctx.mistake_atol):
        # A fact, not a cause: the same call in the same order repeats
        # itself, the batch reversed does not.
        return Verdict(False, f"your output for one batch element depends "
                       f"on the other batch elements: {call} called again "
                       f"with the batch in reverse order gives another "
                       f"output for the same element, while the same call "
                       f"in the same order gives the same output. Each "
                       f"batch element's output must depend on that "
                       f"element alone. (First call: {verdict.message})",
                       "batch elements mixed")
    return verdict
