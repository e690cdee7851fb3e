"""Check kinds for Part 3 (stacked and fused causal heads, GPT-2 size).

Like every value check, these judge in the grading parent; the worker only
runs the calls. Two of them need no expected values at all: causality is
a property of the student's own outputs, and dropout on the weights shows in
the structure of a frozen probe case (see kit/cases.py, "dropout_probe").
"""
from __future__ import annotations

from typing import Any

import torch

from autograder import probes as P
from autograder.checks.values import (FAIL, PASS, CaseCheck, Context,
                                      Verdict, _diagnose, _mistake_tensors,
                                      _outputs, dropout_pattern)
from autograder.compare import close, fmt_shape
from autograder.protocol import Probe, ProbeResult
from autograder.rubric import Check, Outcome, Task, register


def changed_last_token(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its last token replaced by a different, fixed vector."""
    changed = x.clone()
    changed[:, -1] = -2.0 * x[:, -1] + 1.0
    return changed


@register("item", "causal_property", uses_cases=True)
class CausalProperty(CaseCheck):
    """Changing a future token changes no earlier output."""

    def case_probes(self, check: Check, case: Any) -> list[Probe]:
        """The case's call, and the same call with the last token changed."""
        plain = P.case_probe(case, timeout=check.timeout)
        changed = P.case_probe(case, timeout=check.timeout)
        changed.id = f"{plain.id}:last-token-changed"
        changed.args = [changed_last_token(case.tensors["x"])]
        return [plain, changed]

    def judge(self, check: Check, case: Any, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Every position but the last must keep its output."""
        outputs = [_outputs(r, p, None) for r, p in zip(results, probes)]
        for found, problem in outputs:
            if found is None:
                return Verdict(False, problem, "wrong return value")
        before, after = outputs[0][0][0], outputs[1][0][0]
        if before.shape != after.shape or before.dim() != 3:
            return Verdict(False, f"forward returned shapes "
                           f"{fmt_shape(before.shape)} and "
                           f"{fmt_shape(after.shape)}, expected [b, "
                           f"num_tokens, d_out] both times", "wrong shape")
        if before.shape[1] < 2:
            return Verdict(True)
        diff = (before[:, :-1] - after[:, :-1]).abs()
        if bool((diff <= check.atol).all()):
            return Verdict(True)
        position = int(diff.amax(dim=(0, 2)).argmax())
        return Verdict(False, f"changing only the last token changed the "
                       f"output at earlier position {position} (by up to "
                       f"{float(diff.max()):.3g}): earlier tokens can see "
                       f"the future. Mask every position after the query "
                       f"(the upper triangle, cut to num_tokens) before the "
                       f"softmax.", "a future token changed an earlier "
                       "output")


@register("item", "dropout_on_weights", uses_cases=True,
          params={"relative_tolerance": float})
class DropoutOnWeights(CaseCheck):
    """Dropout on the attention weights, on a "dropout_probe" case: x = I
    and every head's values [I; I], so each head's output is [A | A] with A
    its (dropped-out) weights. Dropout on the weights keeps the halves
    equal, each entry 0 or eval / (1 - p); dropout anywhere after the
    weighted sum drops the halves independently. No order of random draws
    is assumed."""

    def case_probes(self, check: Check, case: Any) -> list[Probe]:
        """One seeded train-mode call, and the same call in eval mode."""
        return [P.case_probe(case, train=True, timeout=check.timeout),
                P.case_probe(case, timeout=check.timeout)]

    @staticmethod
    def _halves(out: torch.Tensor, case: Any
                ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The two [b, heads, n, n] copies of the weights in ``out``."""
        b, n = case.tensors["x"].shape[:2]
        heads = case.init.get("num_heads", 1)
        if tuple(out.shape) != (b, n, heads * 2 * n):
            return None
        halves = out.double().view(b, n, heads, 2, n).permute(3, 0, 2, 1, 4)
        return halves[0], halves[1]

    def judge(self, check: Check, case: Any, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Halves equal, entries 0 or rescaled, some dropped, some kept."""
        found, problem = _outputs(results[0], probes[0], None)
        if found is None:
            return Verdict(False, problem, "wrong return value")
        split = self._halves(found[0], case)
        if split is None:
            b, n = case.tensors["x"].shape[:2]
            width = case.init.get("num_heads", 1) * 2 * n
            return Verdict(False, f"in train mode the output has shape "
                           f"{fmt_shape(found[0].shape)}, expected "
                           f"{fmt_shape((b, n, width))}", "wrong shape")
        first, second = split
        p = float(case.init["dropout"])
        # The student's own eval weights, so that a wrong mask or scale
        # costs its own item, not this one too; else the frozen ones.
        clean = case.tensors["attention"].double().view(first.shape)
        own, _ = _outputs(results[1], probes[1], None)
        own_split = self._halves(own[0], case) if own else None
        if own_split is not None and close(*own_split, 1e-6) and \
                torch.isfinite(own_split[0]).all():
            clean = own_split[0]
        if not torch.isfinite(first).all() or not torch.isfinite(
                second).all():
            return Verdict(False, "in train mode the output contains NaN or "
                           "infinite values", "NaN values")
        rel = check.params.get("relative_tolerance", 1e-5)
        if close(first, clean, 1e-5) and close(second, clean, 1e-5):
            return Verdict(False, f"no dropout in train mode: with dropout "
                           f"{p:g} the output equals the eval output. Apply "
                           f"self.dropout to the attention weights.",
                           "dropout not applied")
        if not close(first, second, 1e-6):
            return Verdict(False, "dropout is applied after the weighted sum "
                           "(to the context vectors or the values), not to "
                           "the attention weights: apply self.dropout to "
                           "the softmax weights, then multiply by the "
                           "values.", "dropout not on the weights")
        kind = dropout_pattern(first, clean, p, rel).kind
        if kind == "unscaled":
            return Verdict(False, f"weights are dropped but the kept "
                           f"ones are not scaled by 1/(1 - p) = "
                           f"{1 / (1 - p):.4g}: use self.dropout",
                           "kept weights not rescaled")
        if kind == "wrong":
            return Verdict(False, "in train mode the attention weights are "
                           "neither 0 nor their eval value / (1 - p): is "
                           "dropout applied before the softmax?",
                           "wrong train-mode weights")
        if kind in ("none_dropped", "all_dropped"):
            which = "no" if kind == "none_dropped" else "every"
            return Verdict(False, f"in train mode (dropout {p:g}) {which} "
                           f"weight was dropped: apply self.dropout to the "
                           f"attention weights", "dropout not applied")
        return Verdict(True)


@register("item", "module_size", uses_cases=True,
          params={"num_heads": int, "head_dim": int, "input": list,
                  "seed": int})
class ModuleSize:
    """A factory's module: its heads, head size, parameter count, and a
    shape-preserving forward at full size within the time limit."""

    def _probes(self, check: Check, case: Any) -> list[Probe]:
        inspect = P.inspect_probe(case.cls, case.init, check.timeout)
        generator = torch.Generator().manual_seed(check.params.get("seed",
                                                                   0))
        x = torch.randn(*check.params["input"], generator=generator)
        shape = "x".join(str(d) for d in x.shape)
        call = Probe(id=f"{case.name}:eval:x{shape}", cls=case.cls,
                     init=dict(case.init), args=[x], timeout=check.timeout)
        return [inspect, call]

    def plan(self, check: Check, task: Task, cases: list,
             ctx: Context) -> list[Probe]:
        """Inspect the module, and call it on the full-size input."""
        return [p for case in cases for p in self._probes(check, case)]

    def evaluate(self, check: Check, task: Task, cases: list,
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Every expectation listed, pass or fail."""
        lines, passed = [], True
        for case in cases:
            inspect, call = self._probes(check, case)
            found = results[inspect.id]
            if not found.ok:
                return Outcome(0.0, False,
                               [f"- {FAIL} {P.failure_text(found, inspect)}"],
                               not_implemented=P.is_not_implemented(found))
            attrs = found.attributes
            want = {"num_heads": check.params["num_heads"],
                    "head_dim": check.params["head_dim"],
                    "__parameters__": int(case.tensors["num_parameters"])}
            for name, value in want.items():
                got = attrs.get(name, {}).get("value")
                label = ("parameters" if name == "__parameters__" else
                         f"`{name}`")
                ok = got == value
                passed &= ok
                lines.append(f"- {PASS if ok else FAIL} {label}: "
                             f"{got if got is not None else 'missing'}"
                             f"{'' if ok else f', expected {value:,}'}")
            result = results[call.id]
            shape = tuple(call.args[0].shape)
            if not result.ok:
                passed = False
                lines.append(f"- {FAIL} forward on "
                             f"{fmt_shape(shape)}: "
                             f"{P.failure_text(result, call)}")
                continue
            found, problem = _outputs(result, call, None)
            ok = found is not None and tuple(found[0].shape) == shape
            passed &= ok
            lines.append(f"- {PASS if ok else FAIL} forward on "
                         f"{fmt_shape(shape)} "
                         + ("keeps the shape" if ok else problem or
                            f"returned {fmt_shape(found[0].shape)}"))
        return Outcome(check.points if passed else 0.0, passed, lines)


@register("item", "concatenated_heads", uses_cases=True,
          params={"head_class": str})
class ConcatenatedHeads(CaseCheck):
    """The wrapper's output is its heads' outputs side by side.

    Judged against the frozen output, or else against the student's own
    heads run one by one: a wrong CausalAttention loses its own points, not
    the wrapper's too.
    """

    # Only the wrapper's own call failing fails a case outright; a failing
    # head only takes away the fallback (see judge).
    required_probes = 1

    def case_probes(self, check: Check, case: Any) -> list[Probe]:
        """The wrapper's call, then each head alone with its weights."""
        found = [P.case_probe(case, timeout=check.timeout)]
        init = {k: v for k, v in case.init.items() if k != "num_heads"}
        for i in range(case.init["num_heads"]):
            prefix = f"heads.{i}."
            found.append(Probe(
                id=f"{case.name}:head{i}:eval:x",
                cls=check.params.get("head_class", "CausalAttention"),
                init=dict(init), args=[case.tensors["x"]],
                state={k[len(prefix):]: v for k, v in case.weights.items()
                       if k.startswith(prefix)},
                timeout=check.timeout))
        return found

    def judge(self, check: Check, case: Any, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Frozen output, or the concatenation of the student's heads."""
        found, problem = _outputs(results[0], probes[0], None)
        if found is None:
            return Verdict(False, problem, "wrong return value")
        out, expected = found[0], case.tensors["output"]
        if tuple(out.shape) != tuple(expected.shape):
            b, n, width = expected.shape
            return Verdict(False, f"the output has shape "
                           f"{fmt_shape(out.shape)}, expected "
                           f"{fmt_shape(expected.shape)}: concatenate the "
                           f"{case.init['num_heads']} heads' outputs along "
                           f"the last dimension (num_heads * d_out = "
                           f"{width})", "wrong shape")
        verdict = _diagnose(out, expected, _mistake_tensors(case, "output"),
                            ctx, check, "the output of forward(x)")
        if verdict.ok:
            return verdict
        heads = []
        for result, probe in zip(results[1:], probes[1:]):
            head, _ = _outputs(result, probe, None) if result.ok else (None,
                                                                       "")
            if head is None:
                return verdict
            heads.append(head[0])
        if close(out, torch.cat(heads, dim=-1), check.atol):
            return Verdict(True)
        return Verdict(False, verdict.message + "; nor is it your own "
                       "heads' outputs concatenated along the last "
                       "dimension", verdict.short, verdict.mistake)
