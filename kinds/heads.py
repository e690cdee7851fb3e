"""The wrapper's heads (Task 3.2): its output is its heads' outputs side
by side, judged against the frozen output, the student's own heads, and
stand-in heads that return known tensors.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from autograder import probes as P
from autograder.checks.base import (ATTRIBUTE_NAME, CaseCheck, Context,
                                    Verdict, _explain_other_task,
                                    _failed_probe)
from autograder.checks.outputs import (diagnose, mistake_tensors,
                                       returned_tensors)
from autograder.checks.compare import close, fmt_shape
from autograder.sandbox.protocol import (Probe, ProbeResult, StandIn,
                                         stand_in_output)
from autograder.submission.regions import owner_of_line
from autograder.checks.entries import Check, Task
from autograder.checks.registry import register
from autograder.values import Case


def _head_init(case: Case) -> dict:
    """One head's constructor arguments: the wrapper's, but the number of
    heads (the case's "heads" argument)."""
    return {k: v for k, v in case.init.items()
            if k != case.argument("heads")}


@dataclass(frozen=True)
class ConcatenatedHeadsParams:
    """The head class, the attribute holding the heads, and how close
    outputs must be to count as equal (the known tensors of stand-in
    heads; two heads that coincide)."""

    head_class: str          # the heads' class (the rubric names it)
    heads_attribute: str     # the wrapper's list of heads: weights of
    #                          head i are ``<heads_attribute>.<i>.*``
    stand_in_atol: float = 1e-6
    distinct_atol: float = 1e-6

    def __post_init__(self) -> None:
        if not ATTRIBUTE_NAME.fullmatch(str(self.heads_attribute)):
            raise ValueError(f"heads_attribute must be the attribute name "
                             f"of the wrapper's heads, e.g. \"heads\" (got "
                             f"{self.heads_attribute!r})")


# The overlapping-slices rebuild runs in the parent: at most this many
# strides, on outputs of at most this many numbers (a case's are far
# smaller; heads made wide on purpose would make the parent slow).
MAX_STRIDES = 256
MAX_REBUILT = 1 << 16


def heads_arrangement(out: torch.Tensor, heads: list[torch.Tensor],
                      atol: float) -> str | None:
    """How ``out`` arranges the student's own heads' outputs when not side
    by side in their order, proven by rebuilding it: another order of the
    heads, their sum or mean, their features interleaved (stacked on a new
    last dimension and flattened), or stacked on another dimension and
    reshaped (which mixes positions); None when no arrangement rebuilds it."""
    count = len(heads)
    if count < 2 or count > 6 or out.numel() > MAX_REBUILT:
        return None
    for order in itertools.permutations(range(count)):
        if list(order) == list(range(count)):
            continue
        joined = torch.cat([heads[i] for i in order], dim=-1)
        if tuple(joined.shape) == tuple(out.shape) and \
                close(out, joined, atol, equal_nan=True):
            which = ("in reverse order (the last head first)"
                     if list(order) == list(range(count))[::-1] else
                     f"in another order (heads {list(order)})")
            return (f"concatenated along the last dimension {which}: "
                    f"concatenate them in the order of the wrapper's "
                    f"heads, head 0 first")
    shape = tuple(out.shape)
    overlapping = _overlapping(out, heads, atol)
    if overlapping:
        return overlapping
    total = torch.stack(heads).sum(dim=0)
    for combined, how in ((total, "added together"),
                          (total / count, "averaged")):
        if tuple(combined.shape) == shape and close(out, combined, atol,
                                                    equal_nan=True):
            return (f"{how} (one head's width, not {count} side by side):"
                    f" concatenate them along the last dimension instead, "
                    f"`torch.cat(..., dim=-1)`")
    for dim in range(heads[0].dim() - 1):
        joined = torch.cat(heads, dim=dim)
        if tuple(joined.shape) == shape and close(out, joined, atol,
                                                  equal_nan=True):
            return (f"concatenated along dimension {dim} instead of the "
                    f"last: `torch.cat(..., dim=-1)`")
    for dim in range(heads[0].dim() + 1):
        stacked = torch.stack(heads, dim=dim)
        if stacked.numel() != out.numel():
            return None
        if close(out, stacked.reshape(shape), atol, equal_nan=True):
            what = ("interleaved (stacked on a new last dimension and "
                    "flattened: feature i of every head side by side)"
                    if dim == heads[0].dim() else
                    f"stacked on dimension {dim} and reshaped to "
                    f"{fmt_shape(shape)}, which mixes positions and heads")
            return (f"{what}: concatenate them along the last dimension "
                    f"instead, `torch.cat(..., dim=-1)`")
    return None


def _overlapping(out: torch.Tensor, heads: list[torch.Tensor],
                 atol: float) -> str | None:
    """Heads written into a zero tensor of the right width at a stride
    below their width (``out[..., i:i + d]`` for ``i * d``): the slices
    overlap, each head overwriting the start of the one before."""
    width = heads[0].shape[-1]
    # (one rebuild per stride, in the parent: bounded in both)
    if width > MAX_STRIDES or out.numel() > MAX_REBUILT or \
            any(h.shape != heads[0].shape for h in heads) or \
            out.shape[:-1] != heads[0].shape[:-1] or \
            out.shape[-1] != width * len(heads):
        return None
    for stride in range(1, width):
        rebuilt = torch.zeros_like(out)
        for i, head in enumerate(heads):
            rebuilt[..., i * stride:i * stride + width] = head
        if close(out, rebuilt, atol, equal_nan=True):
            return (f"written from column i * {stride} (head i's slice "
                    f"starts {stride} after the one before, so the slices "
                    f"overlap and each head overwrites the end of the one "
                    f"before): head i belongs at columns i * {width} to "
                    f"(i + 1) * {width}")
    return None


def _informative(heads: list[torch.Tensor], atol: float) -> bool:
    """Whether heads' outputs can show a concatenation: each varies (its
    finite values are not all one number) and no two heads are equal
    (within ``atol``)."""
    for head in heads:
        values = head[torch.isfinite(head)]
        if values.numel() < 2 or bool((values == values[0]).all()):
            return False
    return not any(close(a, b, atol, equal_nan=True)
                   for i, a in enumerate(heads) for b in heads[i + 1:])


@register("item", "concatenated_heads", uses_cases=True,
          params=ConcatenatedHeadsParams)
class ConcatenatedHeads(CaseCheck):
    """The wrapper's output is its heads' outputs side by side.

    Judged against the frozen output, or else against the student's own
    heads run one by one (NaN equal to NaN), and on a call where the head
    class is a stand-in (``Probe.stand_in``) whose instances return known
    tensors: a wrong, raising or hanging CausalAttention loses its own
    points, not the wrapper's too. The stand-in call runs first, so that
    heads that hang cannot skip it. Passing on the student's own heads
    needs evidence: the stand-in call concatenated, or the heads' outputs
    vary and differ.
    """

    # judge handles the failure of every probe itself.
    required_probes = 0
    no_evidence = ("the output is your own heads' outputs side by side, but "
                   "in every case those are constant, NaN or equal to each "
                   "other, and with stand-in heads that return known "
                   "tensors the output is not their concatenation: the "
                   "wrapper must run every head on x and concatenate")

    @staticmethod
    def _stand_in_probe(check: Check, case: Case) -> Probe:
        head_class = check.params.head_class
        init = _head_init(case)
        b, n = case.tensors["x"].shape[:2]
        return P.case_probe(
            case, timeout=check.timeout, suffix=f":stand-in-{head_class}",
            state={}, drawn_seed=int(case.seed),
            stand_in=StandIn(head_class, init,
                             (int(b), int(n), int(case.size("width")))))

    def _calls(self, check: Check, case: Case) -> list[Probe]:
        found = [P.case_probe(case, timeout=check.timeout)]
        x = case.tensors["x"]
        init = _head_init(case)
        for i in range(case.size("heads")):
            prefix = f"{check.params.heads_attribute}.{i}."
            found.append(Probe(
                id=f"{case.name}:head{i}:eval:x",
                cls=check.params.head_class,
                init=dict(init), args=[x],
                state={k[len(prefix):]: v for k, v in case.weights.items()
                       if k.startswith(prefix)},
                timeout=check.timeout, hidden=P.is_hidden(case)))
        return found

    def case_probes(self, check: Check, case: Case) -> list[Probe]:
        """The wrapper's call with stand-in heads, its own call, then each
        head alone with its weights."""
        return [self._stand_in_probe(check, case), *self._calls(check, case)]

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """Every case's stand-in call first: once a call hangs (heads that
        loop), the sandbox skips this item's later probes."""
        found = [self.case_probes(check, case) for case in cases]
        return [f[0] for f in found] + [p for f in found for p in f[1:]]

    def judge(self, check: Check, case: Case, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Frozen output, or the concatenation of the student's heads, or
        (when the call raised outside the wrapper) of stand-in heads."""
        stand_in = self._stand_in(case, results[0], probes[0], check.params)
        results, probes = results[1:], probes[1:]
        if not results[0].ok:
            failure = _explain_other_task(
                _failed_probe(results[:1], probes[:1]), check)
            if owner_of_line(ctx.source, results[0].line) == case.cls:
                if stand_in.ok and not self._heads_return_tensors(
                        results, probes):
                    # It raised on its heads' return value (None, a
                    # tuple): with heads that return tensors it works,
                    # and the heads' own item charges their return.
                    return stand_in
                return failure     # the wrapper's own code raised
            if self._heads_right(check, case, results, probes):
                # Each head alone gives its part of the expected output:
                # the wrapper made them fail (what it passes them, how it
                # builds them), whatever the stand-ins showed.
                return Verdict(
                    False, failure.message + f"; yet each of your "
                    f"{check.params.head_class} heads, run alone on x, "
                    f"gives its part of the expected output: the wrapper "
                    f"must run every head on x and concatenate",
                    failure.short, not_implemented=failure.not_implemented)
            if stand_in.ok:
                # Raised, hung or crashed outside the wrapper's code (its
                # heads): the item that charges that is the heads' own.
                return stand_in
            return Verdict(False, failure.message + stand_in.message,
                           failure.short,
                           not_implemented=failure.not_implemented)
        found, problem = returned_tensors(results[0], probes[0], None)
        if found is None:
            return Verdict(False, problem, "wrong return value")
        out, expected = found[0], case.tensors["output"]
        if tuple(out.shape) != tuple(expected.shape):
            b, n_tokens, width = expected.shape
            # Heads of the wrong width (Task 3.1's) make a wrong width
            # here too: judged on the heads' own outputs.
            return self._own_heads(check, results, probes, Verdict(
                False, f"the output has shape {fmt_shape(out.shape)}, "
                f"expected {fmt_shape(expected.shape)}: concatenate the "
                f"{case.size('heads')} heads' outputs along the last "
                f"dimension ({case.argument('heads')} * "
                f"{case.argument('width')} = {width})", "wrong shape"),
                stand_in)
        verdict = diagnose(out, expected, mistake_tensors(case, "output"),
                           ctx, check, "the output of forward(x)")
        if verdict.ok:
            return verdict
        return self._own_heads(check, results, probes, verdict, stand_in)

    @staticmethod
    def _stand_in(case: Case, result: ProbeResult, probe: Probe,
                  params: ConcatenatedHeadsParams) -> Verdict:
        """The call with stand-in heads: passes when the output is the
        known tensors side by side; else says what it shows."""
        head_class = params.head_class
        if not result.ok:
            return Verdict(False, f" (with stand-in {head_class} heads "
                           f"that return known tensors: "
                           f"{P.failure_text(result, probe)})",
                           P.short_failure(result))
        found, problem = returned_tensors(result, probe, None)
        if found is None:
            return Verdict(False, f" (with stand-in {head_class} heads: "
                           f"{problem})", "wrong return value")
        heads = int(case.size("heads"))
        spec = probe.stand_in
        known = [stand_in_output(probe.drawn_seed, k, spec.shape)
                 for k in range(heads)]
        out = found[0]
        if tuple(out.shape) == tuple(torch.cat(known, -1).shape):
            if close(out, torch.cat(known, -1), params.stand_in_atol):
                return Verdict(True)
            if close(out, torch.cat([known[0]] * heads, -1),
                     params.stand_in_atol):
                return Verdict(False, f"; your heads are one module: "
                               f"only one {head_class} was built for "
                               f"{heads} heads (`[{head_class}(...)] * "
                               f"{case.argument('heads')}` repeats the "
                               f"same object, so "
                               f"every head has the same weights and the "
                               f"same output). Build each "
                               f"head separately: nn.ModuleList"
                               f"([{head_class}(...) for _ in "
                               f"range({case.argument('heads')})])",
                               "heads share a module")
        return Verdict(False, f" (with stand-in {head_class} heads that "
                       f"return known tensors, the output is not their "
                       f"concatenation along the last dimension either)",
                       "not the heads concatenated")

    @staticmethod
    def _heads_return_tensors(results: list[ProbeResult],
                              probes: list[Probe]) -> bool:
        """Whether every head, run alone on x, returns one tensor (what
        a wrapper may pass on): not None, not a tuple, not a raise."""
        for result, probe in zip(results[1:], probes[1:]):
            if not result.ok or result.output_kind != "tensor":
                return False
        return len(results) > 1

    @staticmethod
    def _heads_right(check: Check, case: Case, results: list[ProbeResult],
                     probes: list[Probe]) -> bool:
        """Whether every head, run alone on x with its weights, gives its
        slice of the frozen output (the student's own head class is right
        here, so the wrapper is judged with it, not with stand-ins)."""
        expected = case.tensors["output"]
        heads = int(case.size("heads"))
        width = expected.shape[-1] // heads
        for k, (result, probe) in enumerate(zip(results[1:], probes[1:])):
            found, _ = returned_tensors(result, probe, None) \
                if result.ok else (None, "")
            part = expected[..., k * width:(k + 1) * width]
            if found is None or tuple(found[0].shape) != tuple(part.shape) \
                    or not close(found[0], part, check.atol):
                return False
        return len(results) == heads + 1

    @staticmethod
    def _own_heads(check: Check, results: list[ProbeResult],
                   probes: list[Probe], verdict: Verdict,
                   stand_in: Verdict) -> Verdict:
        """Pass if the wrapper's output is its own heads' outputs side by
        side and that shows something; else ``verdict``, explained."""
        if stand_in.short == "heads share a module":
            return Verdict(False, verdict.message + stand_in.message,
                           stand_in.short)
        found, _ = returned_tensors(results[0], probes[0], None)
        heads = []
        for result, probe in zip(results[1:], probes[1:]):
            head, _ = returned_tensors(result, probe, None) \
                if result.ok else (None, "")
            if head is None:
                return verdict
            heads.append(head[0])
        if found is None:
            return verdict
        try:
            joined = torch.cat(heads, dim=-1)
        except RuntimeError:
            return verdict
        if not close(found[0], joined, check.atol, equal_nan=True):
            # The sentence goes on after the comparison's last words.
            said = verdict.message.rstrip(".")
            # A catalogued mistake keeps its own message.
            how = None if verdict.mistake else heads_arrangement(
                found[0], heads, check.atol)
            if how is None or not _informative(heads,
                                               check.params.distinct_atol):
                return Verdict(False, said + "; nor is it your "
                               "own heads' outputs concatenated along the "
                               "last dimension", verdict.short,
                               verdict.mistake, verdict.candidates)
            return Verdict(False, f"{said}; it is your own "
                           f"heads' outputs {how}", verdict.short,
                           verdict.mistake, verdict.candidates)
        return Verdict(True, evidence=stand_in.ok or _informative(
            heads, check.params.distinct_atol))
