"""Crashes from a wrong size: where a failing call raised a shape error,
the line and expression, the operands' sizes as PyTorch reported them,
and which of the case's sizes the wrong number equals, named only when
it is a fact on every failing case.

Read from what the call already returned (the exception's message and
the student line of its traceback, ``ProbeResult.line``); nothing runs
again. Three forms of PyTorch's message are read: an invalid
view/reshape (``shape '[2, 5, 4, 1]' is invalid for input of size
120``), a matrix product whose inner sizes differ (``mat1 and mat2
shapes cannot be multiplied (10x9 and 12x12)``) and two tensors that do
not broadcast (``The size of tensor a (4) must match the size of tensor
b (5) at non-singleton dimension 3``). A number is named (``1 =
d_in // num_heads``) only when exactly one of the case's sizes
(constructor arguments, the input's batch and length, the head size and
sizes derived from them) equals it on every failing case raising at
that line, and the number changes from case to case: one case's
coincidence (9 tokens of context beside 9 features) is never said.
"""
from __future__ import annotations

import ast
import math
import re

import torch
from dataclasses import dataclass
from typing import Any

from autograder.checks.diagnosis import crash_facts
from autograder.checks.diagnosis.sizes import named_sizes, quote
from autograder.checks.diagnosis.steps import PREFIX
from autograder.checks.entries import select_cases
from autograder.checks.kinds import kind
from autograder.sandbox.protocol import ERROR, Probe, ProbeResult
from autograder.submission import regions
from autograder.values import Case

MARK = "- Where your code stops"
# Case.sizes' name of the case's own input length: the length of a call
# the student's `raise` stopped is the call's, not named as this one.
LENGTH = "seq_len"
_N = r"(\d{1,12})"
_SHAPE_TEXT = r"\[((?:\d{1,12}, ){0,15}\d{1,12})\]"
VIEW = re.compile(r"shape '\[((?:-?\d{1,12}, )*-?\d{1,12})\]' is invalid "
                  r"for input of size " + _N)
MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \(" + _N +
                    "x" + _N + " and " + _N + "x" + _N + r"\)")
BROADCAST = re.compile(r"The size of tensor a \(" + _N + r"\) must match "
                       r"the size of tensor b \(" + _N + r"\) at "
                       r"non-singleton dimension " + _N)
UNPACK = re.compile(r"(too many|not enough) values to unpack \(expected "
                    + _N + r"(?:, got " + _N + r")?\)")
MASK_INDEX = re.compile(r"The shape of the mask " + _SHAPE_TEXT + r" at index "
                        + _N + r" does not match the shape of the indexed "
                        r"tensor " + _SHAPE_TEXT + r" at index " + _N)
CONTRACT = re.compile(r"contracted dimensions need to match, but first has "
                      r"size " + _N + r" in dim (-?\d{1,3}) and second has "
                      r"size " + _N + r" in dim (-?\d{1,3})")
STACK = re.compile(r"stack expects each tensor to be equal size, but got " +
                   _SHAPE_TEXT + r" at entry " + _N + r" and " + _SHAPE_TEXT +
                   r" at entry " + _N)
DTYPES = [re.compile(p) for p in (
    r"expected m1 and m2 to have the same dtype, but got: (\w{1,20}) != "
    r"(\w{1,20})",
    r"expected scalar type (\w{1,20}) but found (\w{1,20})",
    r"mat1 and mat2 must have the same dtype, but got (\w{1,20}) and "
    r"(\w{1,20})")]
_SHAPE = r"\[((?:\d{1,12}, ){0,15}\d{1,12})\]"
EXPAND = re.compile(r"The expanded size of the tensor \(" + _N + r"\) must "
                    r"match the existing size \(" + _N + r"\) at "
                    r"non-singleton dimension " + _N + r"\.\s{1,4}Target "
                    r"sizes: " + _SHAPE + r"\.\s{1,4}Tensor sizes: " +
                    _SHAPE)


@dataclass(frozen=True)
class ShapeError:
    """One case's shape error: what PyTorch said, as words with slots
    for the numbers it names, and the numbers (wrong, then wanted)."""

    form: str                 # "view", "matmul" or "broadcast"
    text: str                 # the operands' sizes, in words
    wrong: int | None         # the student's number that does not fit
    wanted: int | None        # the number that would fit there
    # (a view: which dimension of how many the wrong number is at)
    place: tuple[int, int] | None = None
    # (a broadcast's two sizes, in the message's order: which of them is
    # wrong, PyTorch does not say)


def parse(message: str, layouts: list[tuple[int, ...]] = ()
          ) -> ShapeError | None:
    """The shape error in PyTorch's message, or None; ``layouts``: the
    shapes a correct view takes on the case (which dimension of a view
    is the wrong one)."""
    message = message[:4000]
    found = VIEW.search(message)
    if found:
        shape = [int(n) for n in found.group(1).split(", ")]
        size = int(found.group(2))
        return _view(shape, size, layouts)
    found = MATMUL.search(message)
    if found:
        a, b, c, d = (int(n) for n in found.groups())
        return ShapeError("matmul",
                          f"its left operand's last dimension is {b} (as a "
                          f"[{a}, {b}] matrix, the leading dimensions "
                          f"flattened), the right operand is a "
                          f"[{c}, {d}] matrix that takes {c}", b, c)
    found = EXPAND.search(message)
    if found:
        want, have, dim = (int(n) for n in found.groups()[:3])
        return ShapeError("expand",
                          f"a tensor of shape [{found.group(5)}] is expanded"
                          f" (or broadcast) to [{found.group(4)}]: its {have}"
                          f" at dimension {dim} is neither 1 nor {want}",
                          have, want)
    found = CONTRACT.search(message)
    if found:
        a, da, b, db = found.groups()
        return ShapeError("contract", f"it pairs dimension {da} of its first"
                          f" operand ({a}) with dimension {db} of its second "
                          f"({b})", int(a), int(b))
    found = STACK.search(message)
    if found:
        return _stacked(found)
    found = MASK_INDEX.search(message)
    if found:
        return _mask_index(found)
    for pattern in DTYPES:
        found = pattern.search(message)
        if found:
            a, b = (t.lower() for t in found.groups())
            return ShapeError("dtype", f"its operands are {a} and {b}, and "
                              f"a product takes one dtype", None, None)
    found = UNPACK.search(message)
    if found:
        wanted = int(found.group(2))
        got = int(found.group(3)) if found.group(3) else None
        given = f"{got}" if got is not None else (
            "more" if found.group(1) == "too many" else "fewer")
        return ShapeError("unpack", f"the unpacking takes {wanted} values "
                          f"and was given {given}", got, wanted)
    found = BROADCAST.search(message)
    if found:
        a, b, dim = (int(n) for n in found.groups())
        return ShapeError("broadcast",
                          f"its two tensors have {a} and {b} at dimension "
                          f"{dim}, which neither broadcasts", a, b)
    return None


def _stacked(found: re.Match) -> ShapeError | None:
    """Tensors stacked that differ in one dimension: which, and sizes."""
    a = [int(n) for n in found.group(1).split(", ")]
    b = [int(n) for n in found.group(3).split(", ")]
    differ = [i for i, (m, n) in enumerate(zip(a, b)) if m != n]
    if len(a) != len(b) or len(differ) != 1:
        return None
    d = differ[0]
    return ShapeError("stack", f"the tensors it stacks differ at dimension "
                      f"{d} ({a[d]} at entry {found.group(2)}, {b[d]} at "
                      f"entry {found.group(4)})", None, None)


def _mask_index(found: re.Match) -> ShapeError:
    """A boolean mask laid on other dimensions than its sizes': where it
    starts, and whether ``[..., mask]`` (the last dimensions) fits."""
    mask = [int(n) for n in found.group(1).split(", ")]
    tensor = [int(n) for n in found.group(3).split(", ")]
    start = int(found.group(4)) - int(found.group(2))
    text = (f"a boolean mask of shape [{found.group(1)}] is laid on the "
            f"indexed [{found.group(3)}] tensor's dimensions from "
            f"{start} on, whose sizes differ")
    if len(mask) <= len(tensor) and tensor[len(tensor) - len(mask):] == mask:
        text += (f"; its sizes are those of the last {len(mask)}, which "
                 f"`t[..., mask]` indexes")
    return ShapeError("mask index", text, None, None)


def _view(shape: list[int], size: int,
          layouts: list[tuple[int, ...]]) -> ShapeError:
    asked = math.prod(shape)
    text = (f"it asks for a view of shape [{', '.join(map(str, shape))}] "
            f"({asked} elements) of a tensor of {size} elements")
    # The correct views of this size that differ from the asked one in
    # one dimension: said only if exactly one dimension and value do
    # (else which number is wrong is a guess).
    fits = {(i, shape[i], fit[i]) for fit in layouts
            if len(fit) == len(shape) and math.prod(fit) == size
            for i in range(len(shape))
            if fit[i] != shape[i] and all(
                a == b for j, (a, b) in enumerate(zip(fit, shape)) if j != i)}
    if len(fits) == 1:
        i, n, want = next(iter(fits))
        fit = shape[:i] + [want] + shape[i + 1:]
        return ShapeError("view", text + f"; [{', '.join(map(str, fit))}] "
                          f"fits, {want} in place of your {n} at dimension "
                          f"{i}", n, want, (i, len(shape)))
    return ShapeError("view", text, None, None)


def view_layouts(case: Case) -> list[tuple[int, ...]]:
    """The shapes a correct split of the case's queries takes (from the
    reference's frozen q, [batch, heads, tokens, head size]): heads split
    and transposed or not, folded into the batch, or merged."""
    q = case.tensors.get(PREFIX + "q")
    if q is None or q.dim() != 4:
        return []
    b, h, s, d = q.shape
    return [(b, s, h, d), (b, h, s, d), (b * h, s, d), (b, s, h * d)]


def names(case: Case) -> dict[str, int]:
    """The sizes a number may be named as on ``case``: its constructor's
    integer arguments, the input's sizes, the head size and the sizes
    derived from them (``sizes.named_sizes``)."""
    found = dict(case.sizes)
    if case.scale is not None:
        found.update(named_sizes(case))
    batch, heads = "batch_size", case.argument("heads")   # Case.sizes' name
    if batch in found and heads in found:
        # heads folded into the batch
        found.setdefault(f"{batch} * {heads}", found[batch] * found[heads])
    return found


def own_raise(probe: Probe, result: ProbeResult | None = None
              ) -> ShapeError | None:
    """A call stopped by the student's own ``raise``: the length of the
    input it was given (dimension 1 of its first argument, the one number
    such a check reads), or None (and for a task not written yet, whose
    message already says so)."""
    if result is not None and result.exception == "NotImplementedError":
        return None
    x = probe.args[0] if probe.args else None
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return None
    length = int(x.shape[1])
    return ShapeError("raise", f"its input has {length} positions along "
                      f"dimension 1", length, None)


def common_name(crashes: list[tuple[Case, "ShapeError"]],
                field: str) -> str:
    """The one size that each case's own number (``field`` of its error)
    equals on every case, or "". A fact only if the number changes from
    case to case and the size follows it: one number equal to one size
    on a case or two may be a coincidence, and is not said."""
    numbers = [getattr(error, field) for _, error in crashes]
    if None in numbers or len(set(numbers)) < 2:
        return ""
    common: set[str] | None = None
    for (case, error), number in zip(crashes, numbers):
        fit = {k for k, v in names(case).items()
               if v == number and (k != LENGTH or error.form != "raise")}
        common = fit if common is None else common & fit
    return next(iter(common)) if common and len(common) == 1 else ""


def _one_size(case: Case, number: int | None) -> str:
    """The one size of ``case`` (not the input's length itself) that
    ``number`` equals, or "" (none, or several)."""
    fit = [k for k, v in names(case).items() if v == number and k != LENGTH]
    return fit[0] if len(fit) == 1 else ""


def sentence(case: Case, line: int, error: ShapeError, wrong_name: str,
             wanted_name: str, source: str, count: int) -> str:
    """The student-facing line for one crash (markdown)."""
    which = (f"{'hidden' if case.set == 'hidden' else 'public'} case "
             f"`{case.name}`")
    every = f"on each of the {count} failing cases"
    if error.form == "raise":
        text = (f"{MARK} ({which}): line {line} {quote(source, line)}, your"
                f" own `raise`, stopped the call: {error.text}.")
        equal = wrong_name or _one_size(case, error.wrong)
        if wrong_name:
            text += (f" {every[0].upper()}{every[1:]} it stopped, that "
                     f"length equals `{wrong_name}`")
        elif equal:
            text += (f" On this case that length equals `{equal}` = "
                     f"{error.wrong}")
        guard = crash_facts.inclusive_guard(source, line) if equal else None
        return text + (f"; {guard}." if guard else "." if equal else "")
    plain = ("unpack", "dtype", "mask index", "contract", "stack")
    # (no shape error as PyTorch words it)
    kind = "" if error.form in plain else " a shape error"
    text = (f"{MARK} ({which}): line {line} {quote(source, line)} raised"
            f"{kind}: {error.text}.")
    said = []
    if error.form in ("broadcast", "contract"):
        # Which of the two sizes is wrong, no message says: each named
        # that follows one size on every case, neither called wrong.
        both = [f"the {n} equals `{name}`" for n, name in
                ((error.wrong, wrong_name), (error.wanted, wanted_name))
                if name]
        if both:
            said.append(f"{every}, {' and '.join(both)}")
    else:
        if wrong_name:
            said.append(f"your {error.wrong} equals `{wrong_name}` {every}")
        if wanted_name:
            said.append(f"the {error.wanted} that fits there is "
                        f"`{wanted_name}`")
    if said:
        joined = "; ".join(said)
        text += f" {joined[0].upper()}{joined[1:]}."
    for fact in crash_facts.facts(source, line, error.form,
                                  error.place)[:2]:
        # (a dtype's fact names the line that made the other dtype)
        text += f" {fact[0].upper()}{fact[1:]}." if error.form == "dtype" \
            else f" On that line, {fact}."
    return text


def _crash(runs: list[tuple[Probe, ProbeResult]]
           ) -> tuple[Probe | None, ProbeResult | None]:
    for probe, result in runs:
        if result.status == ERROR and result.phase == "call" and \
                result.line is not None:
            return probe, result
    return None, None


def explain(grade: Any, config: Any, results: dict[str, ProbeResult],
            source: str, public_only: bool = False) -> None:
    """Add a crash line to each failing item whose cases raise a shape
    error at a student line (one per task and line)."""
    said: set[tuple[str, int]] = set()
    raises = _raise_lines(source)
    for task in grade.tasks:
        for item in task.items:
            check, outcome = item.check, item.outcome
            if outcome.passed or outcome.mistakes or \
                    not kind(check).explains_crashes or not check.cases:
                continue    # a catalogued mistake keeps its own words
            impl = kind(check).impl
            by_line: dict[int, list[tuple[Case, ShapeError]]] = {}
            for case in select_cases(check.cases, config.cases):
                if public_only and case.set == "hidden":
                    continue
                probe, found = _crash([(p, results[p.id]) for p in
                                       impl.case_probes(check, case)
                                       if p.id in results])
                # A message the student's own `raise` wrote is no
                # PyTorch shape error, whatever it says: the length of the
                # input it stopped is what may be said of it.
                error = (parse(found.message, view_layouts(case))
                         if found.line not in raises else
                         own_raise(probe, found)) if found else None
                if error is not None:
                    by_line.setdefault(found.line, []).append((case, error))
            for line, crashes in by_line.items():
                if (task.task.id, line) in said:
                    continue
                said.add((task.task.id, line))
                same_form = len({e.form for _, e in crashes}) == 1
                wrong = common_name(crashes, "wrong") if same_form else ""
                wanted = common_name(crashes, "wanted") if same_form else ""
                public = [(c, e) for c, e in crashes if c.set != "hidden"]
                case, error = (public or crashes)[0]
                text = sentence(case, line, error, wrong, wanted, source,
                                len(crashes))
                if case.set == "hidden":
                    outcome.hidden_lines.append(text)
                else:
                    outcome.lines.append(text)


def _raise_lines(source: str) -> set[int]:
    """Every line a ``raise`` statement of the submission spans."""
    return {n for node in regions.nodes(source) if isinstance(node, ast.Raise)
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
