"""Check kinds for Part 3 (stacked and fused causal heads, GPT-2 size).

Like every value check, these judge in the grading parent; the worker only
runs the calls. Two of them need no expected values at all: causality is
a property of the student's own outputs, and dropout on the weights shows in
the structure of a frozen probe case (see kit/cases.py, "dropout_probe").
"""
from __future__ import annotations

from typing import Any

import torch

from autograder.report import mdsafe
from autograder import probes as P
from autograder.checks.base import (FAIL, PASS, CaseCheck, Context, Verdict,
                                    _explain_other_task, _failed_probe)
from autograder.checks.values import (_diagnose, _mistake_tensors, _outputs,
                                      dropout_pattern)
from autograder.checks.compare import close, fmt_shape
from autograder.sandbox.protocol import Probe, ProbeResult, stand_in_output
from autograder.submission.regions import owner_of_line
from autograder.rubric import Check, Outcome, Task, register


def changed_last_token(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its last token replaced by a different, fixed vector."""
    changed = x.clone()
    changed[:, -1] = -2.0 * x[:, -1] + 1.0
    return changed


def changed_first_token(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its first token replaced by a different, fixed vector."""
    changed = x.clone()
    changed[:, 0] = -2.0 * x[:, 0] + 1.0
    return changed


def changed_first_token_twice(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its first token moved twice as far as
    :func:`changed_first_token` moves it (the same step, twice)."""
    changed = x.clone()
    changed[:, 0] = x[:, 0] + 2.0 * (-3.0 * x[:, 0] + 1.0)
    return changed


def nonlinear(outputs: list[torch.Tensor]) -> bool:
    """Whether outputs for three inputs equally spaced on a line (x, x + d,
    x + 2d) lie off a line: attention weights computed from the input
    (a softmax of query-key scores) do; fixed weights (uniform, the
    identity, any constant matrix) make a module affine in its input, and
    so does returning x or its values. The threshold is far above float
    rounding (an affine module's second difference is ~1e-7 here)."""
    a, b, c = (o.double() for o in outputs)
    if not a.shape == b.shape == c.shape:
        return False
    second = (c - 2 * b + a)
    finite = torch.isfinite(second)
    if not bool(finite.any()):
        return False
    scale = 1.0 + float(torch.stack([a, b, c])[
        torch.isfinite(torch.stack([a, b, c]))].abs().max())
    return float(second[finite].abs().max()) > 1e-4 * scale


def _differs(a: torch.Tensor, b: torch.Tensor, atol: float) -> torch.Tensor:
    """Where ``a`` and ``b`` differ by more than ``atol`` (NaN equal to
    NaN: a position NaN in both calls did not change)."""
    a, b = a.double(), b.double()
    both_nan = torch.isnan(a) & torch.isnan(b)
    same = ((a - b).abs() <= atol) | both_nan | (a == b)
    return ~same


@register("item", "causal_property", uses_cases=True)
class CausalProperty(CaseCheck):
    """Changing a future token changes no earlier output, and the outputs
    mix positions as attention does: changing the first token changes a
    later output (a constant or a per-position function earns nothing),
    and not in proportion to the change (weights computed from the input:
    uniform or other fixed weights earn nothing)."""

    no_evidence = ("later outputs change in proportion to the first token "
                   "(moving it twice by the same step changes them twice "
                   "by the same amount) in every case: the attention "
                   "weights do not depend on the input. Compute them from "
                   "the queries and keys, softmax(q k^T / sqrt(d_k)) with "
                   "the future masked, not as fixed (e.g. uniform) weights")

    def case_probes(self, check: Check, case: Any) -> list[Probe]:
        """The case's call, and the same call with the last token changed
        and with the first token changed (once, and twice as far)."""
        plain = P.case_probe(case, timeout=check.timeout)
        found = [plain]
        for label, change in (("last", changed_last_token),
                              ("first", changed_first_token),
                              ("first-twice", changed_first_token_twice)):
            probe = P.case_probe(case, timeout=check.timeout)
            probe.id = f"{plain.id}:{label}-token-changed"
            probe.args = [change(case.tensors["x"])]
            found.append(probe)
        return found

    def judge(self, check: Check, case: Any, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Every position but the last keeps its output when the last
        token changes; some later position changes with the first."""
        outputs = [_outputs(r, p, None) for r, p in zip(results, probes)]
        for found, problem in outputs:
            if found is None:
                return Verdict(False, problem, "wrong return value")
        before, after, first, twice = (o[0][0] for o in outputs)
        if before.dim() != 3 or not \
                before.shape == after.shape == first.shape == twice.shape:
            return Verdict(False, f"forward returned shapes "
                           f"{fmt_shape(before.shape)}, "
                           f"{fmt_shape(after.shape)} and "
                           f"{fmt_shape(first.shape)}, expected [b, "
                           f"num_tokens, d_out] every time", "wrong shape")
        if before.shape[1] < 2:
            return Verdict(True, evidence=False)   # one token shows nothing
        diff = _differs(before[:, :-1], after[:, :-1], check.atol)
        if bool(diff.any()):
            position = int(diff.any(dim=2).any(dim=0).nonzero()[0])
            return Verdict(False, f"changing only the last token changed "
                           f"the output at earlier position {position}: "
                           f"earlier tokens can see the future. Mask every "
                           f"position after the query (the upper triangle, "
                           f"cut to num_tokens) before the softmax.",
                           "a future token changed an earlier output")
        if not bool(_differs(before[:, 1:], first[:, 1:], check.atol).any()):
            return Verdict(False, "changing the first token changed no "
                           "later output: in causal attention every token "
                           "attends to the first one, so its output "
                           "depends on it. Compute the attention weights "
                           "over the earlier tokens and return their "
                           "weighted sum of the values.",
                           "outputs do not mix positions")
        return Verdict(True, evidence=nonlinear(
            [before[:, 1:], first[:, 1:], twice[:, 1:]]))


@register("item", "dropout_on_weights", uses_cases=True,
          params={"relative_tolerance": float})
class DropoutOnWeights(CaseCheck):
    """Dropout on the attention weights, on a "dropout_probe" case: x = I
    and every head's values [I; I], so each head's output is [A | A] with A
    its (dropped-out) weights. Dropout on the weights keeps the halves
    equal, each entry 0 or eval / (1 - p); dropout anywhere after the
    weighted sum drops the halves independently. No order of random draws
    is assumed."""

    no_evidence = ("the eval output is proportional to the input in "
                   "every case (x, 2x and 3x give outputs on a line): the "
                   "attention weights do not depend on the input, so "
                   "dropout on them shows nothing. Compute them from the "
                   "queries and keys, softmax(q k^T / sqrt(d_k)) with the "
                   "future masked")

    def case_probes(self, check: Check, case: Any) -> list[Probe]:
        """One seeded train-mode call, the same call in eval mode, and
        eval calls on 2x and 3x (weights computed from the input)."""
        found = [P.case_probe(case, train=True, timeout=check.timeout),
                 P.case_probe(case, timeout=check.timeout)]
        for factor in (2, 3):
            probe = P.case_probe(case, timeout=check.timeout)
            probe.id += f"*{factor}"
            probe.args = [factor * case.tensors["x"]]
            found.append(probe)
        return found

    @staticmethod
    def _evidence(results: list[ProbeResult], probes: list[Probe]) -> bool:
        """Eval outputs on x, 2x and 3x off a line (see ``nonlinear``)."""
        found = [_outputs(r, p, None)[0] if r.ok else None
                 for r, p in zip(results[1:4], probes[1:4])]
        return None not in found and nonlinear([f[0] for f in found])

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
        # Positions its own eval weights leave NaN (a mask hiding a whole
        # row) are left out.
        clean = case.tensors["attention"].double().view(first.shape)
        own, _ = _outputs(results[1], probes[1], None)
        own_split = self._halves(own[0], case) if own else None
        if own_split is not None and close(*own_split, 1e-6,
                                           equal_nan=True):
            clean = own_split[0]
        elif own_split is not None:
            # Even in eval mode the halves differ: another unit (the heads'
            # split or merge) breaks the probe's premise and costs its own
            # item. Here only whether dropout acts in train mode is judged.
            if close(found[0], own[0], 1e-5, equal_nan=True):
                return Verdict(False, f"no dropout in train mode: with "
                               f"dropout {p:g} the output equals the eval "
                               f"output. Apply self.dropout to the "
                               f"attention weights.", "dropout not applied")
            return Verdict(True, evidence=self._evidence(results, probes))
        finite = torch.isfinite(clean)
        if bool((~torch.isfinite(first) & finite).any()) or bool(
                (~torch.isfinite(second) & finite).any()):
            return Verdict(False, "in train mode the output contains NaN or "
                           "infinite values where the eval output is "
                           "finite", "NaN values")
        if not bool(finite.any()):
            return Verdict(False, "in eval mode every weight is NaN, so "
                           "dropout cannot be checked", "NaN values")
        rel = check.params.get("relative_tolerance", 1e-5)
        if close(first, clean, 1e-5, equal_nan=True) and \
                close(second, clean, 1e-5, equal_nan=True):
            return Verdict(False, f"no dropout in train mode: with dropout "
                           f"{p:g} the output equals the eval output. Apply "
                           f"self.dropout to the attention weights.",
                           "dropout not applied")
        if not close(first, second, 1e-6, equal_nan=True):
            return Verdict(False, "dropout is applied after the weighted sum "
                           "(to the context vectors or the values), not to "
                           "the attention weights: apply self.dropout to "
                           "the softmax weights, then multiply by the "
                           "values.", "dropout not on the weights")
        first, clean = first[finite], clean[finite]
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
        return Verdict(True, evidence=self._evidence(results, probes))


def _drawn_shapes(case: Any) -> dict[str, list[int]]:
    """Path -> shape of every ``<path>.shape`` of the case: weights the
    worker draws from a seed (the same in two modules to compare them)."""
    return {key[:-len(".shape")]: [int(d) for d in value.tolist()]
            for key, value in sorted(case.tensors.items())
            if key.endswith(".shape")}


def _describe(found: dict[str, Any] | None) -> str:
    if found is None:
        return "missing"
    details = ", ".join(f"{k}={v}" for k, v in found.items() if k != "type")
    # a type's __name__ is the student's: a code span, escaped
    return mdsafe.code_span(f"{found.get('type')}({details})")


def _same_failure(a: ProbeResult, b: ProbeResult) -> bool:
    return not a.ok and not b.ok and a.exception == b.exception and \
        a.line == b.line


@register("item", "module_size", uses_cases=True,
          params={"num_heads": int, "head_dim": int, "seed": int,
                  "own_class": str, "own_init": dict})
class ModuleSize:
    """A factory's module, judged on what it returns: the student's own
    class built with the expected configuration (same attributes, same
    output with the same weights), its heads, head size and parameter
    count. The call runs on the case's small input, so that a wrong
    MultiHeadAttention (Task 3.3's item) cannot exhaust the memory here.
    """

    def _probes(self, check: Check, case: Any) -> list[Probe]:
        seed = check.params.get("seed", 0)
        own_cls = check.params.get("own_class", "MultiHeadAttention")
        own_init = dict(check.params.get("own_init", {}))
        drawn = _drawn_shapes(case)
        x = case.tensors["x"]
        shape = "x".join(str(d) for d in x.shape)
        # The configuration alone, whatever the student's own class does:
        # the factory with a stand-in for that class (Probe.stand_in),
        # which checks its constructor's arguments. First, so that an own
        # class that hangs cannot make the sandbox skip it.
        config = Probe(id=f"{case.name}:stand-in-{own_cls}:x{shape}",
                       cls=case.cls, init=dict(case.init), args=[x],
                       drawn_seed=seed, timeout=check.timeout,
                       stand_in={"cls": own_cls, "init": own_init,
                                 "shape": [int(d) for d in x.shape]})
        # Both calls seeded alike: dropout left on in eval mode (Task
        # 3.3's item) draws the same masks on both sides, not a difference.
        made = Probe(id=f"{case.name}:eval:x{shape}:seed{seed}",
                     cls=case.cls, init=dict(case.init), drawn=drawn,
                     drawn_seed=seed, args=[x], seed=seed,
                     timeout=check.timeout)
        own = Probe(id=f"{case.name}:own:{own_cls}:eval:x{shape}:seed{seed}",
                    cls=own_cls, init=own_init, drawn=drawn,
                    drawn_seed=seed, args=[x], seed=seed,
                    timeout=check.timeout)
        return [config, P.inspect_probe(case.cls, case.init, check.timeout),
                P.inspect_probe(own_cls, own_init, check.timeout), made, own]

    def plan(self, check: Check, task: Task, cases: list,
             ctx: Context) -> list[Probe]:
        """The factory with a stand-in class; inspect the module and the
        student's own class; call both with the same weights."""
        return [p for case in cases for p in self._probes(check, case)]

    @staticmethod
    def _configured(result: ProbeResult, probe: Probe) -> bool:
        """Whether the factory built the stand-in with the expected
        arguments and returned it (its output is the first instance's)."""
        found, _ = _outputs(result, probe, None) if result.ok else (None, "")
        return found is not None and close(found[0], stand_in_output(
            probe.drawn_seed, 0, probe.stand_in["shape"]), 0.0)

    def evaluate(self, check: Check, task: Task, cases: list,
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Every expectation listed, pass or fail. A failure that is the
        student's own class's (its attributes, size or output, or an
        exception in its code) is not charged when the factory passes the
        expected configuration (Task 3.3's items charge it)."""
        lines: list[str] = []
        factory_fault = own_fault = False
        own_cls = check.params.get("own_class", "MultiHeadAttention")
        own_init = check.params.get("own_init", {})
        args = ", ".join(f"{k}={v}" for k, v in own_init.items())
        own_text = f"{own_cls}({args})"
        configured = True
        for case in cases:
            config, inspect, own_inspect, call, own_call = \
                self._probes(check, case)
            configured &= self._configured(results[config.id], config)
            found = results[inspect.id]
            if not found.ok:
                if owner_of_line(ctx.source, found.line) != own_cls:
                    return Outcome(
                        0.0, False,
                        [f"- {FAIL} {P.failure_text(found, inspect)}"],
                        not_implemented=P.is_not_implemented(found))
                own_fault = True
                lines.append(f"- {FAIL} {P.failure_text(found, inspect)} "
                             f"(raised in {own_cls}'s code)")
                continue
            attrs = found.attributes
            want = {"num_heads": check.params["num_heads"],
                    "head_dim": check.params["head_dim"],
                    "__parameters__": int(case.tensors["num_parameters"])}
            for name, value in want.items():
                got = attrs.get(name, {}).get("value")
                label = ("parameters" if name == "__parameters__" else
                         f"`{name}`")
                ok = got == value
                own_fault |= not ok
                shown = "missing" if got is None else mdsafe.inline(got, 60)
                lines.append(f"- {PASS if ok else FAIL} {label}: {shown}"
                             f"{'' if ok else f', expected {value:,}'}")
            own = results[own_inspect.id]
            if not own.ok:
                own_fault = True
                lines.append(f"- {FAIL} your {own_text} could not be built "
                             f"to compare with: "
                             f"{P.failure_text(own, own_inspect)}")
            else:
                differ = sorted(k for k in {*attrs, *own.attributes}
                                if attrs.get(k) != own.attributes.get(k))
                factory_fault |= bool(differ)
                shown = "; ".join(
                    f"{mdsafe.code_span(k)} is {_describe(attrs.get(k))}, "
                    f"expected "
                    f"{_describe(own.attributes.get(k))}"
                    for k in differ[:4])
                lines.append(f"- {PASS} it is your {own_text}" if
                             not differ else
                             f"- {FAIL} it is not your {own_text}: {shown}")
            line, own_side = self._forward(check, call, own_call, results,
                                           ctx, own_text)
            lines.append(line)
            if line.startswith(f"- {FAIL}"):
                own_fault |= own_side
                factory_fault |= not own_side
        passed = not (factory_fault or own_fault)
        if not passed and not factory_fault and configured:
            # Only the student's own class is wrong: its items charge it.
            passed = True
            lines.append(f"- {PASS} {task.cls}() builds "
                         f"{own_text} (checked with a stand-in {own_cls}): "
                         f"the {FAIL} above are your {own_cls}'s, which "
                         f"Task 3.3's items charge, not this one")
        return Outcome(check.points if passed else 0.0, passed, lines)

    @staticmethod
    def _forward(check: Check, call: Probe, own_call: Probe,
                 results: dict[str, ProbeResult], ctx: Context,
                 own_text: str) -> tuple[str, bool]:
        """The line on the module's forward, and whether a failure there
        is the student's own class's (it does the same)."""
        shape = tuple(call.args[0].shape)
        result, own = results[call.id], results[own_call.id]
        where = f"forward on {fmt_shape(shape)}"
        if not result.ok:
            loading = result.phase == own.phase == "load" and \
                result.message == own.message
            if _same_failure(result, own) and (loading or owner_of_line(
                    ctx.source, result.line) == own_call.cls):
                # The student's own class raised (or lacks a layer the
                # weights need): its own item (3.3) charges that.
                return (f"- {where} not checked: your {own_call.cls} "
                        f"fails there too (Task 3.3's item charges that): "
                        f"{P.failure_text(result, call)}"), True
            return f"- {FAIL} {where}: {P.failure_text(result, call)}", False
        found, problem = _outputs(result, call, None)
        mine, _ = _outputs(own, own_call, None) if own.ok else (None, "")
        same = found is not None and mine is not None and close(
            found[0], mine[0], 1e-5, equal_nan=True) or (
            found is None and mine is None and own.ok
            and result.output_kind == own.output_kind)
        if found is None or tuple(found[0].shape) != shape:
            problem = problem or (f"returned {fmt_shape(found[0].shape)}, "
                                  f"expected the input's shape")
            return f"- {FAIL} {where}: {problem}", same
        if mine is not None and not same:
            return (f"- {FAIL} {where}: the output differs from your "
                    f"{own_text} with the same weights"), False
        return f"- {PASS} {where} keeps the shape", True


def _informative(heads: list[torch.Tensor]) -> bool:
    """Whether heads' outputs can show a concatenation: each varies (its
    finite values are not all one number) and no two heads are equal."""
    for head in heads:
        values = head[torch.isfinite(head)]
        if values.numel() < 2 or bool((values == values[0]).all()):
            return False
    return not any(close(a, b, 1e-6, equal_nan=True)
                   for i, a in enumerate(heads) for b in heads[i + 1:])


@register("item", "concatenated_heads", uses_cases=True,
          params={"head_class": str})
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
    def _stand_in_probe(check: Check, case: Any) -> Probe:
        head_class = check.params.get("head_class", "CausalAttention")
        init = {k: v for k, v in case.init.items() if k != "num_heads"}
        b, n = case.tensors["x"].shape[:2]
        probe = P.case_probe(case, timeout=check.timeout)
        probe.id += f":stand-in-{head_class}"
        probe.state = {}
        probe.drawn_seed = int(case.seed)
        probe.stand_in = {"cls": head_class, "init": init,
                          "shape": [int(b), int(n), int(init["d_out"])]}
        return probe

    def _calls(self, check: Check, case: Any) -> list[Probe]:
        found = [P.case_probe(case, timeout=check.timeout)]
        x = case.tensors["x"]
        init = {k: v for k, v in case.init.items() if k != "num_heads"}
        for i in range(case.init["num_heads"]):
            prefix = f"heads.{i}."
            found.append(Probe(
                id=f"{case.name}:head{i}:eval:x",
                cls=check.params.get("head_class", "CausalAttention"),
                init=dict(init), args=[x],
                state={k[len(prefix):]: v for k, v in case.weights.items()
                       if k.startswith(prefix)},
                timeout=check.timeout))
        return found

    def case_probes(self, check: Check, case: Any) -> list[Probe]:
        """The wrapper's call with stand-in heads, its own call, then each
        head alone with its weights."""
        return [self._stand_in_probe(check, case), *self._calls(check, case)]

    def plan(self, check: Check, task: Task, cases: list,
             ctx: Context) -> list[Probe]:
        """Every case's stand-in call first: once a call hangs (heads that
        loop), the sandbox skips this item's later probes."""
        found = [self.case_probes(check, case) for case in cases]
        return [f[0] for f in found] + [p for f in found for p in f[1:]]

    def judge(self, check: Check, case: Any, results: list[ProbeResult],
              probes: list[Probe], ctx: Context) -> Verdict:
        """Frozen output, or the concatenation of the student's heads, or
        (when the call raised outside the wrapper) of stand-in heads."""
        head_class = check.params.get("head_class", "CausalAttention")
        stand_in = self._stand_in(case, results[0], probes[0], head_class)
        results, probes = results[1:], probes[1:]
        if not results[0].ok:
            failure = _explain_other_task(
                _failed_probe(results[:1], probes[:1]), check)
            if owner_of_line(ctx.source, results[0].line) == case.cls:
                return failure     # the wrapper's own code raised
            if stand_in.ok:
                # Raised, hung or crashed outside the wrapper's code (its
                # heads): the item that charges that is the heads' own.
                return stand_in
            return Verdict(False, failure.message + stand_in.message,
                           failure.short,
                           not_implemented=failure.not_implemented)
        found, problem = _outputs(results[0], probes[0], None)
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
                f"{case.init['num_heads']} heads' outputs along the last "
                f"dimension (num_heads * d_out = {width})", "wrong shape"),
                stand_in)
        verdict = _diagnose(out, expected, _mistake_tensors(case, "output"),
                            ctx, check, "the output of forward(x)")
        if verdict.ok:
            return verdict
        return self._own_heads(check, results, probes, verdict, stand_in)

    @staticmethod
    def _stand_in(case: Any, result: ProbeResult, probe: Probe,
                  head_class: str) -> Verdict:
        """The call with stand-in heads: passes when the output is the
        known tensors side by side; else says what it shows."""
        if not result.ok:
            return Verdict(False, f" (with stand-in {head_class} heads "
                           f"that return known tensors: "
                           f"{P.failure_text(result, probe)})",
                           P.short_failure(result))
        found, problem = _outputs(result, probe, None)
        if found is None:
            return Verdict(False, f" (with stand-in {head_class} heads: "
                           f"{problem})", "wrong return value")
        heads = int(case.init["num_heads"])
        spec = probe.stand_in
        known = [stand_in_output(probe.drawn_seed, k, spec["shape"])
                 for k in range(heads)]
        out = found[0]
        if tuple(out.shape) == tuple(torch.cat(known, -1).shape):
            if close(out, torch.cat(known, -1), 1e-6):
                return Verdict(True)
            if close(out, torch.cat([known[0]] * heads, -1), 1e-6):
                return Verdict(False, f"; your heads are one module: "
                               f"only one {head_class} was built for "
                               f"{heads} heads (`[{head_class}(...)] * "
                               f"num_heads` repeats the same object, so "
                               f"every head has the same weights and the "
                               f"same output). Build each "
                               f"head separately: nn.ModuleList"
                               f"([{head_class}(...) for _ in "
                               f"range(num_heads)])", "heads share a module")
        return Verdict(False, f" (with stand-in {head_class} heads that "
                       f"return known tensors, the output is not their "
                       f"concatenation along the last dimension either)",
                       "not the heads concatenated")

    @staticmethod
    def _own_heads(check: Check, results: list[ProbeResult],
                   probes: list[Probe], verdict: Verdict,
                   stand_in: Verdict) -> Verdict:
        """Pass if the wrapper's output is its own heads' outputs side by
        side and that shows something; else ``verdict``, explained."""
        if stand_in.short == "heads share a module":
            return Verdict(False, verdict.message + stand_in.message,
                           stand_in.short)
        found, _ = _outputs(results[0], probes[0], None)
        heads = []
        for result, probe in zip(results[1:], probes[1:]):
            head, _ = _outputs(result, probe, None) if result.ok else (None,
                                                                       "")
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
            return Verdict(False, verdict.message + "; nor is it your own "
                           "heads' outputs concatenated along the last "
                           "dimension", verdict.short, verdict.mistake,
                           verdict.candidates)
        return Verdict(True, evidence=stand_in.ok or _informative(heads))
