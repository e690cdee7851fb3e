"""The GPT-2 size factory (Task 3.4): the module it returns is the
student's own class built with the expected configuration, of the
expected heads, head size and parameter count, and shape-preserving.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from autograder.text import mdsafe
from autograder import probes as P
from autograder.checks.base import FAIL, PASS, Context
from autograder.checks.outputs import returned_tensors
from autograder.checks.compare import close, fmt_shape
from autograder.sandbox.protocol import (Probe, ProbeResult, StandIn,
                                         stand_in_output)
from autograder.submission.regions import nodes, owner_of_line
from autograder.checks.entries import Check, Outcome, Task
from autograder.checks.registry import register
from autograder.values import Case


@dataclass(frozen=True)
class ModuleSizeParams:
    """The module's expected attributes (name -> value, e.g. its heads
    and head size: the rubric names them), the student's own class and
    arguments the module must equal, the seed of both calls, and how
    close outputs must be (the factory's to the student's class's; the
    stand-in's known output)."""

    attributes: dict
    own_class: str           # the student's fused class (the rubric names it)
    seed: int = 0
    own_init: dict = field(default_factory=dict)
    output_atol: float = 1e-5
    stand_in_atol: float = 0.0


def _drawn_shapes(case: Case) -> dict[str, list[int]]:
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


def _given(message: str, own_cls: str, keys: list[str]
           ) -> dict[str, str] | None:
    """The arguments the stand-in says it was built with (name -> repr,
    names among ``keys`` only), from its message (``stand_in.py``), or
    None. The message comes from the sandbox: read with bounds."""
    head = f"{own_cls} was built with "
    at = message.find(head)
    if at < 0 or not keys:
        return None
    given = message[at + len(head):at + len(head) + 2000]
    given = given.rsplit("; expected ", 1)[0]
    parts = re.split(r"(?:^|, )(" + "|".join(map(re.escape, keys)) + ")=",
                     given)
    if len(parts) < 3 or parts[0]:
        return None
    return dict(zip(parts[1::2], parts[2::2]))


def _init_order(source: str, own_cls: str) -> list[str]:
    """The parameters of ``own_cls.__init__`` after ``self``, in order."""
    for node in nodes(source):
        if isinstance(node, ast.ClassDef) and node.name == own_cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    return [a.arg for a in f.args.posonlyargs +
                            f.args.args][1:]
    return []


def arguments_line(result: ProbeResult, own_cls: str, own_init: dict,
                   source: str, factory: str) -> str:
    """What the factory passed to the student's class where it differs
    from the expected configuration, read from the stand-in's refusal;
    values that are the expected ones in other places are said to be
    swapped, with the order the class's ``__init__`` takes them in."""
    if result.ok or result.exception != "TypeError":
        return ""
    given = _given(result.message, own_cls, list(own_init))
    if not given:
        return ""
    code = mdsafe.code_span
    want = {k: repr(own_init[k]) for k in given}
    got = ", ".join(code(f"{k}={v}", 60) for k, v in given.items())
    needs = ", ".join(code(f"{k}={v}") for k, v in want.items())
    text = f"- {FAIL} {factory}() builds your {own_cls} with {got}; " \
        f"it needs {needs}"
    if len(given) > 1 and sorted(given.values()) == sorted(want.values()):
        order = _init_order(source, own_cls)
        shown = f" ({', '.join(order)})" if order else ""
        text += (f": the values of {' and '.join(map(code, given))} are "
                 f"swapped. Positional arguments bind in the order your "
                 f"`__init__` takes them{shown}; pass these by name")
    return text + "."


def _attribute_lines(check: Check, case: Case, attrs: dict[str, Any]
                     ) -> tuple[list[str], bool]:
    """One line per expected attribute of the module (the rubric's, and
    its parameter count), and whether any differs."""
    want = {**check.params.attributes,
            "__parameters__": int(case.tensors["num_parameters"])}
    lines, wrong = [], False
    for name, value in want.items():
        got = attrs.get(name, {}).get("value")
        label = "parameters" if name == "__parameters__" else f"`{name}`"
        ok = got == value
        wrong |= not ok
        shown = "missing" if got is None else mdsafe.inline(got, 60)
        lines.append(f"- {PASS if ok else FAIL} {label}: {shown}"
                     f"{'' if ok else f', expected {value:,}'}")
    return lines, wrong


@register("item", "module_size", uses_cases=True, params=ModuleSizeParams)
class ModuleSize:
    """A factory's module, judged on what it returns: the student's own
    class built with the expected configuration (same attributes, same
    output with the same weights), its heads, head size and parameter
    count. The call runs on the case's small input, so that a wrong
    MultiHeadAttention (Task 3.3's item) cannot exhaust the memory here.
    """

    def _probes(self, check: Check, case: Case) -> list[Probe]:
        seed = check.params.seed
        own_cls = check.params.own_class
        own_init = dict(check.params.own_init)
        drawn = _drawn_shapes(case)
        x = case.tensors["x"]
        shape = "x".join(str(d) for d in x.shape)
        # The configuration alone, whatever the student's own class does:
        # the factory with a stand-in for that class (Probe.stand_in),
        # which checks its constructor's arguments. First, so that an own
        # class that hangs cannot make the sandbox skip it.
        config = Probe(id=f"{case.name}:stand-in-{own_cls}:x{shape}",
                       cls=case.cls, init=dict(case.init), args=[x],
                       drawn_seed=seed, hidden=P.is_hidden(case),
                       stand_in=StandIn(own_cls, own_init,
                                        tuple(int(d) for d in x.shape)))
        # Both calls seeded alike: dropout left on in eval mode (Task
        # 3.3's item) draws the same masks on both sides, not a difference.
        made = Probe(id=f"{case.name}:eval:x{shape}:seed{seed}",
                     cls=case.cls, init=dict(case.init), drawn=drawn,
                     drawn_seed=seed, args=[x], seed=seed,
                     hidden=P.is_hidden(case))
        own = Probe(id=f"{case.name}:own:{own_cls}:eval:x{shape}:seed{seed}",
                    cls=own_cls, init=own_init, drawn=drawn,
                    drawn_seed=seed, args=[x], seed=seed,
                    hidden=P.is_hidden(case))
        return [config, P.inspect_probe(case.cls, case.init),
                P.inspect_probe(own_cls, own_init), made, own]

    def plan(self, check: Check, task: Task, cases: list[Case],
             ctx: Context) -> list[Probe]:
        """The factory with a stand-in class; inspect the module and the
        student's own class; call both with the same weights."""
        return [p for case in cases for p in self._probes(check, case)]

    @staticmethod
    def _configured(result: ProbeResult, probe: Probe, atol: float) -> bool:
        """Whether the factory built the stand-in with the expected
        arguments and returned it (its output is the first instance's,
        within ``atol``)."""
        found, _ = returned_tensors(result, probe, None) \
            if result.ok else (None, "")
        return found is not None and close(found[0], stand_in_output(
            probe.drawn_seed, 0, probe.stand_in.shape), atol)

    def evaluate(self, check: Check, task: Task, cases: list[Case],
                 results: dict[str, ProbeResult], ctx: Context) -> Outcome:
        """Every expectation listed, pass or fail. A failure that is the
        student's own class's (its attributes, size or output, or an
        exception in its code) is not charged when the factory passes the
        expected configuration (Task 3.3's items charge it)."""
        lines: list[str] = []
        factory_fault = own_fault = False
        own_cls = check.params.own_class
        own_init = check.params.own_init
        args = ", ".join(f"{k}={v}" for k, v in own_init.items())
        own_text = f"{own_cls}({args})"
        configured = True
        for case in cases:
            config, inspect, own_inspect, call, own_call = \
                self._probes(check, case)
            configured &= self._configured(results[config.id], config,
                                           check.params.stand_in_atol)
            found = results[inspect.id]
            own = results[own_inspect.id]
            passed_args = arguments_line(results[config.id], own_cls,
                                         own_init, ctx.source, task.cls)
            if passed_args and passed_args not in lines:
                lines.append(passed_args)
            if not found.ok:
                # Raised in the own class's code: its fault only if it
                # raises built as expected too; where that builds, the
                # factory gave it what made it raise (7 heads for 768).
                if owner_of_line(ctx.source, found.line) != own_cls or \
                        own.ok:
                    return Outcome(
                        0.0, False,
                        [f"- {FAIL} {P.failure_text(found, inspect)}",
                         *lines],
                        not_implemented=P.is_not_implemented(found))
                own_fault = True
                lines.append(f"- {FAIL} {P.failure_text(found, inspect)} "
                             f"(raised in {own_cls}'s code)")
                continue
            attrs = found.attributes
            said, wrong = _attribute_lines(check, case, attrs)
            lines += said
            own_fault |= wrong
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
        found, problem = returned_tensors(result, call, None)
        mine, _ = returned_tensors(own, own_call, None) \
            if own.ok else (None, "")
        same = found is not None and mine is not None and close(
            found[0], mine[0], check.params.output_atol,
            equal_nan=True) or (
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
