"""Facts read from the student's code itself, said beside a failing
item of the task whose methods hold them:

- a result computed and dropped: a call that returns a new tensor used as
  a statement (``scores.masked_fill(mask, -inf)`` without assigning it, a
  submodule called for nothing), or a name assigned a computed tensor
  that no later line of the method reads;
- an integer division of two numbers that is not what it reads as
  (``x ** (1 // 2)`` is ``x ** 0``), and a root written without
  parentheses (``x ** 1 / 2`` is ``(x ** 1) / 2``);
- a product with a literal infinity (``mask * float("-inf")``), NaN
  wherever the other factor is 0;
- ``~`` before ``.bool()`` (``(~keep).bool()``): on integers ``~`` is
  bitwise not, True everywhere once made bool;
- a warning Python or PyTorch printed for one of the methods' lines while
  the public cases ran (``x.T`` on a 3-d tensor, a softmax without
  ``dim``), read from the printed output the student is shown anyway.

Not guesses about the cause: each is true of the source whatever it
computes, and is said only beside an item of the same task that failed (a
passing submission hears nothing). Which calls are side-effect free is
data (``pure_calls.toml``).
"""
from __future__ import annotations

import ast
import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from autograder.submission import regions
from autograder.text import mdsafe

MARK = "- Computed and dropped"
DIVISION = "- Integer division"
INFINITY = "- Times infinity"
WARNED = "- Python warned"
PRECEDENCE = "- Operator precedence"
INVERT = "- Bitwise not"
SHARED = "- One object repeated"
TRAINING = "- Training flag"
ALONE = "- Summed alone"
ROUNDED = "- Root rounded down"
CLASS_STATE = "- One object for every call"
IGNORED = "- Input ignored"
WALKED = "- Every module walked"
MARKS = (MARK, DIVISION, INFINITY, WARNED, PRECEDENCE, INVERT, SHARED,
         TRAINING, ALONE, ROUNDED, CLASS_STATE, IGNORED, WALKED)
ADD_PRODUCTS = ("baddbmm", "addmm", "addbmm", "addmv", "addr")
# "file.py:61: UserWarning: message", as warnings.showwarning prints it
WARNING = re.compile(r"^(?P<file>[^:\n]{1,255}):(?P<line>\d{1,7}): "
                     r"(?P<category>[A-Za-z]{1,40}Warning): "
                     r"(?P<message>[^\n]{1,600})$", re.MULTILINE)
MAX_WARNING = 300   # characters of a warning quoted
INFINITE_NAMES = ("math", "torch", "np", "numpy")   # <name>.inf
DATA = Path(__file__).with_name("pure_calls.toml")
MAX_SHOWN = 3       # lines named per task
MAX_QUOTE = 100     # characters of a quoted line


@dataclass(frozen=True)
class Fact:
    """One fact: its line and the sentence saying it."""

    line: int
    text: str


@functools.lru_cache(maxsize=1)
def _calls() -> dict[str, frozenset[str]]:
    data = tomllib.loads(DATA.read_text(encoding="utf-8"))
    return {k: frozenset(v) for k, v in data.items() if isinstance(v, list)}


def _text(node: ast.AST) -> str:
    """The code of ``node`` as the parser reads it (one line, no
    comments), cut to MAX_QUOTE characters."""
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):   # nested past the printer's depth
        text = "..."
    return text if len(text) <= MAX_QUOTE else text[:MAX_QUOTE - 3] + "..."


def quote(node: ast.AST) -> str:
    """``node``'s code as one code span (cut to MAX_QUOTE characters)."""
    return mdsafe.code_span(_text(node))


def _modules(cls: ast.ClassDef | None, calls: dict[str, frozenset[str]]
             ) -> set[str]:
    """``self.<name>`` attributes ``__init__`` sets to a layer of the
    list (not in place): calling one returns a new tensor."""
    found: set[str] = set()
    for node in ast.walk(cls) if cls else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.value, ast.Call):
            target, call = node.targets[0], node.value
            layer = call.func.attr if isinstance(call.func, ast.Attribute) \
                else getattr(call.func, "id", "")
            inplace = any(k.arg == "inplace" and not (
                isinstance(k.value, ast.Constant) and k.value.value is False)
                for k in call.keywords)
            if isinstance(target, ast.Attribute) and \
                    isinstance(target.value, ast.Name) and \
                    target.value.id == "self" and \
                    layer in calls["layers"] and not inplace:
                found.add(target.attr)
    return found


def _pure(call: ast.Call, modules: set[str],
          calls: dict[str, frozenset[str]]) -> str | None:
    """What kind of result-returning call ``call`` is: "method" (a tensor
    method that returns a new tensor), "function" (torch's or F's),
    "module" (a submodule) or None (anything else: say nothing)."""
    func = call.func
    if not isinstance(func, ast.Attribute) or any(
            k.arg == "inplace" for k in call.keywords):
        return None
    owner = func.value
    if isinstance(owner, ast.Name) and owner.id == "self":
        return "module" if func.attr in modules else None
    if isinstance(owner, ast.Name) and owner.id in calls["namespaces"] or \
            isinstance(owner, ast.Attribute) and owner.attr == "functional":
        return "function" if func.attr in calls["functions"] else None
    return "method" if func.attr in calls["methods"] else None


def _sentence(kind: str, call: ast.Call, quoted: str, line: int) -> str:
    name = call.func.attr     # every kind is an attribute call
    if kind == "module":
        return (f"{MARK}: line {line} {quoted} calls `self.{name}` and "
                f"drops what it returns: a layer returns a new tensor and "
                f"leaves its input as it was. Assign the result and use it.")
    if kind == "function":
        return (f"{MARK}: line {line} {quoted} computes `{name}(...)` and "
                f"drops it: the call returns a new tensor and changes none "
                f"of its arguments. Assign the result and use it.")
    receiver = quote(call.func.value)
    twin = (f" (or use the in-place `{name}_`)"
            if hasattr(torch.Tensor, f"{name}_") else "")
    return (f"{MARK}: line {line} {quoted} computes `.{name}(...)` and drops "
            f"it: `{name}` returns a new tensor and leaves {receiver} as "
            f"it was. Assign the result{twin}.")


ALWAYS = (10 ** 9, 0)     # a read that counts as after every line


def _reads(function: ast.AST) -> dict[str, list[tuple[int, int]]]:
    """Each name the function reads (or deletes), with where; a name a
    nested function or lambda reads, or a global or nonlocal one, may be
    read whenever it is called: read after every line."""
    found: dict[str, list[tuple[int, int]]] = {}
    for n in ast.walk(function):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store):
            found.setdefault(n.id, []).append((n.lineno, n.col_offset))
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            for name in n.names:
                found.setdefault(name, []).append(ALWAYS)
        elif n is not function and isinstance(
                n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for inner in ast.walk(n):
                if isinstance(inner, ast.Name):
                    found.setdefault(inner.id, []).append(ALWAYS)
    return found


def _in_loop(function: ast.AST) -> set[int]:
    """ids of the nodes inside a loop (a read before them may run after)."""
    inside: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            inside |= {id(n) for n in ast.walk(node)}
    return inside


_DYNAMIC = {"locals", "vars", "eval", "exec"}   # reads no walk can see


def _task(source: str, cls_name: str, methods: tuple[str, ...]
          ) -> tuple[ast.ClassDef | None, list[ast.FunctionDef]]:
    """The task's class (None for a module-level function) and its
    methods' nodes, as the rubric names them (``cls`` and ``methods``)
    and wherever block statements indent them (regions' rule)."""
    try:
        tree = regions.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, []
    cls = next((n for n in regions.flatten(tree.body)
                if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
    found = regions.task_functions(tree, {cls_name: methods})
    return cls, [f for _, f in found if isinstance(f, ast.FunctionDef)]


def facts(source: str, cls_name: str, methods: tuple[str, ...]
          ) -> list[Fact]:
    """Every fact of ``cls_name``'s ``methods`` (the rubric's task: a
    module-level function is its name with the method ""), in line
    order."""
    cls, functions = _task(source, cls_name, methods)
    calls = _calls()
    modules = _modules(cls, calls)
    found = list(_shared(cls)) + list(_class_state(cls))
    helpers = _helpers(source)
    dropouts = _dropouts(cls)
    for function in functions:
        found += _in_function(function, modules, calls)
        found += _training_flags(function, helpers)
        found += _eval_only_dropout(function, dropouts)
        for rule in RULES:
            found += rule(function)
    return sorted(found, key=lambda d: d.line)


def _in_function(function: ast.FunctionDef, modules: set[str],
                 calls: dict[str, frozenset[str]]
                 ) -> Iterator[Fact]:
    reads = _reads(function)
    if _DYNAMIC & reads.keys():
        return
    looped = _in_loop(function)
    for node in ast.walk(function):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            kind = _pure(node.value, modules, calls)
            if kind:
                yield Fact(node.lineno, _sentence(
                    kind, node.value, quote(node), node.lineno))
        elif _dead_store(node, reads, looped) and \
                _pure(node.value, modules, calls):
            name = mdsafe.code_span(node.targets[0].id)
            yield Fact(node.lineno, (
                f"{MARK}: line {node.lineno} {quote(node)} assigns "
                f"{name}, which no later line of `{function.name}` reads: "
                f"what it holds never reaches the result."))


def _number(node: ast.AST) -> int | float | None:
    """The value of a numeric literal (a sign allowed), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _divisions(function: ast.FunctionDef) -> Iterator[Fact]:
    """``a // b`` of two literal numbers whose quotient is not whole."""
    for node in ast.walk(function):
        if not (isinstance(node, ast.BinOp) and
                isinstance(node.op, ast.FloorDiv)):
            continue
        a, b = _number(node.left), _number(node.right)
        if a is None or b is None or b == 0 or (a / b).is_integer():
            continue
        quoted = quote(node)
        yield Fact(node.lineno, (
            f"{DIVISION}: line {node.lineno} {quoted} is {a // b:g}, not "
            f"{a / b:g}: `//` rounds the quotient down. Write `{a:g} / "
            f"{b:g}` (or the number itself)."))


def _roots(function: ast.FunctionDef) -> Iterator[Fact]:
    """``a ** 1 / 2`` (or ``** -1 / 2``), alone or after another operand
    (``x / a ** 1 / 2`` is ``(x / a) / 2``): a power of 1 then a division,
    where a root was surely meant."""
    for node in ast.walk(function):
        if not (isinstance(node, ast.BinOp) and
                isinstance(node.op, ast.Div)):
            continue
        power = node.left   # the operand just before "/ 2"
        while isinstance(power, ast.BinOp) and \
                isinstance(power.op, (ast.Div, ast.Mult)):
            power = power.right
        if not (isinstance(power, ast.BinOp) and
                isinstance(power.op, ast.Pow)):
            continue
        exponent, divisor = _number(power.right), _number(node.right)
        if exponent not in (1, -1) or divisor in (None, 0):
            continue
        meant, written = exponent / divisor, _text(power)
        code = mdsafe.code_span
        part = f"{written} / {divisor:g}"
        whole = "" if _text(node) == part else f" {quote(node)}:"
        yield Fact(node.lineno, (
            f"{PRECEDENCE}: line {node.lineno}{whole} {code(part)} is "
            f"{code(f'({written}) / {divisor:g}')}: `**` binds tighter "
            f"than `/`, so this divides by {divisor:g} instead of taking "
            f"the power {meant:g}. Write `** {meant:g}` (or "
            f"{code(f'** ({_text(power.right)} / {divisor:g})')})."))


def _inverted_then_bool(function: ast.FunctionDef) -> Iterator[Fact]:
    """``(~x).bool()``: ``~`` taken before the conversion to bool."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and not node.args and \
                isinstance(node.func, ast.Attribute) and \
                node.func.attr == "bool" and \
                isinstance(node.func.value, ast.UnaryOp) and \
                isinstance(node.func.value.op, ast.Invert):
            inner = _text(node.func.value.operand)
            yield Fact(node.lineno, (
                f"{INVERT}: line {node.lineno} {quote(node)} takes `~` "
                f"before `.bool()`: where {mdsafe.code_span(inner)} holds "
                f"integers, `~` is bitwise not (~1 is -2, ~0 is -1), and "
                f"both are True once made bool, so every position is True."
                f" Convert first: {mdsafe.code_span(f'~{inner}.bool()')}"
                f"."))


def _infinite(node: ast.AST) -> bool:
    """A literal infinity: float("-inf"), -math.inf, torch.inf..."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op,
                                                    (ast.USub, ast.UAdd)):
        return _infinite(node.operand)
    if isinstance(node, ast.Attribute):
        return node.attr == "inf" and isinstance(node.value, ast.Name) \
            and node.value.id in INFINITE_NAMES
    return isinstance(node, ast.Call) and \
        isinstance(node.func, ast.Name) and node.func.id == "float" and \
        len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and \
        isinstance(node.args[0].value, str) and \
        node.args[0].value.strip().lower().lstrip("+-") in ("inf",
                                                            "infinity")


def _infinite_products(function: ast.FunctionDef) -> Iterator[Fact]:
    """``x * inf`` (either side): NaN where x is 0."""
    for node in ast.walk(function):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) \
                and (_infinite(node.left) or _infinite(node.right)):
            quoted = quote(node)
            yield Fact(node.lineno, (
                f"{INFINITY}: line {node.lineno} {quoted} multiplies by "
                f"infinity: where the other factor is 0 the product is "
                f"NaN (0 times infinity), not 0. To hide positions, fill "
                f"them instead: `masked_fill(mask, float(\"-inf\"))` or "
                f"`torch.where`."))


def _repeated(node: ast.AST) -> tuple[ast.Call, ast.AST] | None:
    """The call and the count of ``[f(...)] * n`` or ``n * [f(...)]`` (a
    list of one call's result, repeated), else None."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return None
    for listed, count in ((node.left, node.right), (node.right, node.left)):
        if isinstance(listed, ast.List) and len(listed.elts) == 1 and \
                isinstance(listed.elts[0], ast.Call) and \
                not isinstance(count, (ast.List, ast.Tuple)):
            return listed.elts[0], count
    return None


def _shared(cls: ast.ClassDef | None) -> Iterator[Fact]:
    """``[nn.Linear(...)] * 3`` anywhere in the class (``__init__``
    builds what every task of it uses): one object, n times."""
    for node in ast.walk(cls) if cls else ():
        found = _repeated(node)
        if found is None:
            continue
        call, count = found
        made = quote(call.func)
        fix = f"[{_text(call)} for _ in range({_text(count)})]"
        yield Fact(node.lineno, (
            f"{SHARED}: line {node.lineno} {quote(node)} repeats one "
            f"object: {made} runs once, and every element of the list is "
            f"that same object, whatever names it is bound to (a layer "
            f"repeated so is one layer, with one set of weights). Make "
            f"each with its own call: {mdsafe.code_span(fix)}."))


def _flag_default(function: ast.FunctionDef) -> bool | None:
    """The default of ``function``'s ``training`` parameter (a literal
    True or False), or None (no such parameter, or no literal default)."""
    args = function.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):],
                     args.defaults)) + [
        (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d]
    for arg, default in pairs:
        if arg.arg == "training" and isinstance(default, ast.Constant) \
                and isinstance(default.value, bool):
            return default.value
    return None


def _passes_flag(function: ast.FunctionDef) -> ast.Call | None:
    """The call ``function`` hands its ``training`` to (``training=
    training``, or as a positional argument), else None."""
    return next((n for n in ast.walk(function) if isinstance(n, ast.Call)
                 and any(isinstance(a, ast.Name) and a.id == "training"
                         for a in [*n.args,
                                   *(k.value for k in n.keywords)])), None)


def _index(function: ast.FunctionDef, name: str) -> int | None:
    positional = [a.arg for a in function.args.posonlyargs +
                  function.args.args]
    return positional.index(name) if name in positional else None


def _fixed_rate(rate: ast.AST) -> bool:
    """A dropout rate that cannot depend on the mode: a number above 0,
    or an attribute of ``self`` (``self.dropout.p``); a local name may
    have been chosen by the mode on an earlier line."""
    number = _number(rate)
    if number is not None:
        return number > 0
    while isinstance(rate, ast.Attribute):
        rate = rate.value
    return isinstance(rate, ast.Name) and rate.id == "self"


def _mode_gated(function: ast.FunctionDef) -> set[int]:
    """ids of the nodes under an ``if`` whose test reads ``training``."""
    gated: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, (ast.If, ast.IfExp)) and any(
                isinstance(n, (ast.Name, ast.Attribute)) and
                getattr(n, "id", getattr(n, "attr", "")) == "training"
                for n in ast.walk(node.test)):
            gated |= {id(n) for n in ast.walk(node)}
    return gated


def _training_flags(function: ast.FunctionDef,
                    helpers: dict[str, tuple[ast.FunctionDef, int | None,
                                             ast.Call]]
                    ) -> Iterator[Fact]:
    """A call that leaves ``training`` at a default of False (a helper of
    the file's that passes it on to its dropout), ``F.dropout`` without it
    (default True: dropout in eval mode too), or a fused attention call
    with a fixed ``dropout_p`` outside any test of the mode."""
    gated = _mode_gated(function)
    for node in ast.walk(function):
        if not isinstance(node, ast.Call) or any(
                k.arg in ("training", None) for k in node.keywords) or \
                any(isinstance(a, ast.Starred) for a in node.args):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in helpers:
            helper, at, given = helpers[func.id]
            if at is not None and len(node.args) > at:
                continue
            off = (", so that dropout is off, in train mode too" if
                   isinstance(given.func, ast.Attribute) and
                   given.func.attr == "dropout" else "")
            yield Fact(node.lineno, (
                f"{TRAINING}: line {node.lineno} {quote(node)} leaves "
                f"`training` at its default, False, and `{func.id}` passes"
                f" it to {quote(given)} (line {given.lineno}){off}. Pass "
                f"`training=self.training`."))
        elif isinstance(func, ast.Attribute) and \
                func.attr == "scaled_dot_product_attention":
            rate = next((k.value for k in node.keywords
                         if k.arg == "dropout_p"), None)
            if rate is None or id(node) in gated or not _fixed_rate(rate):
                continue
            tied = f"dropout_p={_text(rate)} if self.training else 0.0"
            yield Fact(node.lineno, (
                f"{TRAINING}: line {node.lineno} `{func.attr}(..., "
                f"dropout_p={_text(rate)})` drops out whatever the module's"
                f" mode (the call has no training flag): in eval mode too. "
                f"Tie it to the mode ({mdsafe.code_span(tied)}), or leave "
                f"it out where the module has no dropout."))
        elif isinstance(func, ast.Attribute) and func.attr == "dropout" \
                and (isinstance(func.value, ast.Name) and
                     func.value.id in ("F", "functional") or
                     isinstance(func.value, ast.Attribute) and
                     func.value.attr == "functional") and len(node.args) < 3:
            yield Fact(node.lineno, (
                f"{TRAINING}: line {node.lineno} {quote(node)} leaves "
                f"`training` at its default, True: dropout in eval mode "
                f"too. Pass `training=self.training` (or use "
                f"`nn.Dropout`, which follows the module's mode)."))


def _dropouts(cls: ast.ClassDef | None) -> set[str]:
    """``self.<name>`` attributes the class sets to an ``nn.Dropout``."""
    found: set[str] = set()
    for node in ast.walk(cls) if cls else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.value, ast.Call):
            target, func = node.targets[0], node.value.func
            if isinstance(target, ast.Attribute) and \
                    isinstance(target.value, ast.Name) and \
                    target.value.id == "self" and "Dropout" == (
                        func.attr if isinstance(func, ast.Attribute)
                        else getattr(func, "id", "")):
                found.add(target.attr)
    return found


def _eval_branch(node: ast.If) -> list[ast.stmt]:
    """The statements of ``node`` that run only in eval mode: the body
    under ``not self.training`` (or ``self.training == False`` /
    ``is False``), the ``else`` under ``self.training``."""
    test = node.test

    def training(n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and n.attr == "training" and \
            isinstance(n.value, ast.Name) and n.value.id == "self"
    if training(test):
        return node.orelse
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and \
            training(test.operand):
        return node.body
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and \
            training(test.left) and isinstance(
                test.ops[0], (ast.Eq, ast.Is)) and \
            isinstance(test.comparators[0], ast.Constant) and \
            test.comparators[0].value is False:
        return node.body
    return []


def _eval_only_dropout(function: ast.FunctionDef, dropouts: set[str]
                       ) -> Iterator[Fact]:
    """A call of the module's own ``nn.Dropout`` that runs only in eval
    mode, where the layer passes its input through unchanged."""
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        for stmt in _eval_branch(node):
            for call in ast.walk(stmt):
                func = getattr(call, "func", None)
                if isinstance(call, ast.Call) and \
                        isinstance(func, ast.Attribute) and \
                        func.attr in dropouts and \
                        isinstance(func.value, ast.Name) and \
                        func.value.id == "self":
                    yield Fact(call.lineno, (
                        f"{TRAINING}: line {call.lineno} {quote(call)} runs "
                        f"only in eval mode (the test {quote(node.test)} on"
                        f" line {node.lineno}), where `nn.Dropout` passes "
                        f"its input through unchanged: dropout never acts. "
                        f"The layer follows the module's mode by itself: "
                        f"call it without the test."))


def _helpers(source: str) -> dict[str, tuple[ast.FunctionDef, int | None,
                                             ast.Call]]:
    """The file's module-level functions whose ``training`` defaults to
    False and is handed to a call, by name: each with where ``training``
    sits among its positional parameters and that call (read once per
    helper, however often it is called)."""
    try:
        tree = regions.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    found = {}
    for n in regions.flatten(tree.body):
        if isinstance(n, ast.FunctionDef) and _flag_default(n) is False:
            given = _passes_flag(n)
            if given is not None:
                found[n.name] = (n, _index(n, "training"), given)
    return found


def _einsum_spec(node: ast.AST) -> list[list[str]] | None:
    """The axes of each operand of an einsum call, then the output's:
    ``torch.einsum("bij,bjk->bik", ...)`` (one letter an axis) or einops'
    ``einsum(a, b, "b i j, b j k -> b i k")`` (names between spaces)."""
    if not (isinstance(node, ast.Call) and node.args and (
            isinstance(node.func, ast.Attribute) and
            node.func.attr == "einsum" or isinstance(node.func, ast.Name)
            and node.func.id == "einsum")):
        return None
    first, last = node.args[0], node.args[-1]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        spec, named = first.value, False
    elif isinstance(last, ast.Constant) and isinstance(last.value, str):
        spec, named = last.value, True
    else:
        return None
    if "->" not in spec or "." in spec or len(spec) > 120:
        return None
    inputs, output = spec.split("->", 1)
    parts = [*inputs.split(","), output]
    return [p.split() if named else list(p.replace(" ", "")) for p in parts]


def _lone_sums(function: ast.FunctionDef) -> Iterator[Fact]:
    """``einsum("bhqk,bhqd->bhqd", w, v)``: an index summed over that only
    one operand has, so that operand is summed on its own, never paired
    with another."""
    for node in ast.walk(function):
        axes = _einsum_spec(node)
        if axes is None or len(axes) < 3:
            continue
        operands, output = axes[:-1], set(axes[-1])
        summed = {a for o in operands for a in o} - output
        for letter in sorted(summed):
            holders = [i for i, o in enumerate(operands) if letter in o]
            if len(holders) != 1:
                continue
            which = ("first", "second", "third")[holders[0]] \
                if holders[0] < 3 else f"operand {holders[0] + 1}"
            yield Fact(node.lineno, (
                f"{ALONE}: line {node.lineno} {quote(node)} sums its "
                f"{which} operand over `{letter}` on its own: `{letter}` "
                f"is in no other operand and not in the output, so only "
                f"that operand's sums over `{letter}` enter the product. "
                f"An index summed over pairs two operands when both have "
                f"it."))


def _is_root(node: ast.AST) -> bool:
    """``math.sqrt(...)``, ``torch.sqrt(...)``, ``x ** 0.5``."""
    if isinstance(node, ast.Call):
        func = node.func
        return (func.attr if isinstance(func, ast.Attribute) else
                getattr(func, "id", "")) == "sqrt"
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) \
        and _number(node.right) == 0.5


def _rounded_roots(function: ast.FunctionDef) -> Iterator[Fact]:
    """``math.isqrt(d)`` or ``int(sqrt(d))``: a root rounded down."""
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            getattr(func, "id", "")
        if name == "isqrt" or name == "int" and len(node.args) == 1 and \
                _is_root(node.args[0]):
            yield Fact(node.lineno, (
                f"{ROUNDED}: line {node.lineno} {quote(node)} is the "
                f"square root rounded down to a whole number (the root of "
                f"2 gives 1, of 3 gives 1, of 8 gives 2). Keep the root as "
                f"it is: `math.sqrt(...)` or `** 0.5`."))


_GROWS = ("append", "extend", "insert", "update", "add", "setdefault",
          "__setitem__")


def _class_state(cls: ast.ClassDef | None) -> Iterator[Fact]:
    """A list, dict or set made in the class body (one object for every
    instance and call) that a method grows through ``self`` or the
    class, with no ``self.<name> =`` of its own in any method."""
    if cls is None:
        return
    shared = {}
    for node in cls.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(
                node.value, (ast.List, ast.Dict, ast.Set)) or \
                isinstance(node, ast.Assign) and isinstance(
                    node.value, ast.Call) and getattr(
                    node.value.func, "id", "") in ("list", "dict", "set"):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target]
            shared.update({t.id: node for t in targets
                           if isinstance(t, ast.Name)})
    owners = {"self", cls.name}
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and \
                        isinstance(t.value, ast.Name) and \
                        t.value.id == "self":
                    shared.pop(t.attr, None)
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and \
                isinstance(node.func, ast.Attribute) and \
                node.func.attr in _GROWS and \
                isinstance(node.func.value, ast.Attribute) and \
                isinstance(node.func.value.value, ast.Name) and \
                node.func.value.value.id in owners and \
                node.func.value.attr in shared:
            made = shared.pop(node.func.value.attr)
            yield Fact(node.lineno, (
                f"{CLASS_STATE}: line {made.lineno} {quote(made)} is in "
                f"the class body: one object, shared by every instance "
                f"and every call, and line {node.lineno} {quote(node)} "
                f"adds to it, so what one call (or instance) adds is still "
                f"there for the next. Make a new one in the call that "
                f"fills it."))


_PLACEHOLDERS = ("empty", "zeros", "new_empty", "new_zeros", "empty_like",
                 "zeros_like")


def _placeholder(node: ast.AST, assigned: dict[str, ast.AST]) -> bool:
    """An input made to be ignored (``q.new_empty(...)``, ``torch.zeros``),
    written in place or bound to a name (``assigned``: name -> value)."""
    if isinstance(node, ast.Name):
        node = assigned.get(node.id)
    return isinstance(node, ast.Call) and (
        getattr(node.func, "attr", getattr(node.func, "id", "")) in
        _PLACEHOLDERS)


def _beta_zero(function: ast.FunctionDef) -> Iterator[Fact]:
    """``torch.baddbmm(m, a, b, beta=0)``: the input multiplied by 0 (a
    placeholder made to be ignored aside)."""
    assigned: dict[str, ast.AST] = {}
    for a in ast.walk(function):
        if isinstance(a, ast.Assign):
            for t in a.targets:
                if isinstance(t, ast.Name):
                    assigned.setdefault(t.id, a.value)
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and \
                isinstance(node.func, ast.Attribute) and \
                node.func.attr in ADD_PRODUCTS and any(
                    k.arg == "beta" and _number(k.value) == 0
                    for k in node.keywords) and not (
                    node.args and _placeholder(node.args[0], assigned)):
            added = quote(node.args[0]) if node.args and isinstance(
                node.func.value, ast.Name) and node.func.value.id == \
                "torch" else "the tensor it adds to"
            yield Fact(node.lineno, (
                f"{IGNORED}: line {node.lineno} {quote(node)} passes "
                f"`beta=0`: `{node.func.attr}` returns beta * input + "
                f"alpha * (the product), so {added} is multiplied by 0 "
                f"and ignored. Leave beta at its default, 1."))


def _module_walks(function: ast.FunctionDef) -> Iterator[Fact]:
    """A loop over ``m.modules()`` (or ``named_modules()``), which yields
    ``m`` itself first, then every module inside it at every depth."""
    for node in ast.walk(function):
        loops = [node.iter] if isinstance(node, (ast.For, ast.AsyncFor)) \
            else [g.iter for g in node.generators] if isinstance(
                node, (ast.ListComp, ast.SetComp, ast.GeneratorExp,
                       ast.DictComp)) else []
        for it in loops:
            if isinstance(it, ast.Call) and not it.args and \
                    isinstance(it.func, ast.Attribute) and \
                    it.func.attr in ("modules", "named_modules"):
                owner = quote(it.func.value)
                yield Fact(it.lineno, (
                    f"{WALKED}: line {it.lineno} {quote(it)} yields "
                    f"{owner} itself first, then every module inside it at"
                    f" every depth. To go through the modules it holds, "
                    f"iterate it: `for m in {_text(it.func.value)}`."))


# The facts read from one function's code, beside its dropped results.
RULES = (_divisions, _infinite_products, _roots, _inverted_then_bool,
         _lone_sums, _rounded_roots, _beta_zero, _module_walks)


def _dead_store(node: ast.AST, reads: dict[str, list[tuple[int, int]]],
                looped: set[int]) -> bool:
    """A call's result bound to one name that nothing reads afterwards
    (outside a loop, where "afterwards" is the text's order)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and
            isinstance(node.targets[0], ast.Name) and
            isinstance(node.value, ast.Call)) or id(node) in looped:
        return False
    name = node.targets[0].id
    end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
    return not name.startswith("_") and \
        not any(at > end for at in reads.get(name, ()))


def warned(printed: str, filename: str, source: str, cls_name: str,
           methods: tuple[str, ...]) -> list[Fact]:
    """The warnings ``printed`` (the public calls' output) holds for a
    line of ``cls_name``'s ``methods`` in ``filename``: one per line and
    category, its longest message (the output may be cut mid-line)."""
    spans = _spans(source, cls_name, methods)
    lines = source.splitlines()
    found: dict[tuple[int, str], tuple[str, Fact]] = {}
    for match in WARNING.finditer(printed):
        line = int(match["line"])
        if Path(match["file"]).name != Path(filename).name or not any(
                a <= line <= b for a, b in spans) or line > len(lines):
            continue
        message = match["message"].split(" (Triggered internally")[0]
        if len(message) > MAX_WARNING:
            message = message[:MAX_WARNING - 3] + "..."
        key = (line, match["category"])
        if len(found.get(key, ("",))[0]) >= len(message):
            continue    # once a line; the whole message (output is cut)
        code = mdsafe.code_span(lines[line - 1].strip()[:MAX_QUOTE])
        found[key] = (message, Fact(line, (
            f"{WARNED} at line {line} {code} ({match['category']}): "
            f"{mdsafe.inline(message)}")))
    return [fact for _, fact in found.values()]


def _spans(source: str, cls_name: str, methods: tuple[str, ...]
           ) -> list[tuple[int, int]]:
    return [(f.lineno, f.end_lineno or f.lineno)
            for f in _task(source, cls_name, methods)[1]]


def explain(grade: Any, source: str) -> None:
    """Add the facts of each task's methods to the task's first failing
    item (feedback only, never points)."""
    said: set[str] = set()    # a class's facts, once for all its tasks
    for task in grade.tasks:
        failing = [i for i in task.items if not i.outcome.passed]
        if not failing:
            continue
        cls, methods = task.task.cls, task.task.methods
        found = facts(source, cls, methods) + warned(
            grade.stdout, grade.filename, source, cls, methods)
        found = sorted((f for f in found if f.text not in said),
                       key=lambda f: f.line)[:MAX_SHOWN]
        said.update(f.text for f in found)
        failing[0].outcome.lines += [d.text for d in found]
