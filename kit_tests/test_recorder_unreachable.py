"""The shape recorder cannot be found or wrapped by student code: it has
no name in builtins (code run from a string at import searched builtins by
its name's prefix and wrapped it, recording every line as "bound no
tensor"); the traced copy calls it through constants of its own code, and
a call from any other code (a wrapper, a replaced ``__code__``, a forged
record) makes the trace evidence of nothing: the shape deduction applies.
Each attack is run beside its control, the same code without the trick.
"""
from __future__ import annotations

import builtins

import torch

from autograder.checks.trace_integrity import CANARY_LINE, trace_problem
from autograder.sandbox.protocol import Probe
from autograder.sandbox.shape_table import FORGED as REFUSED
from autograder.sandbox.worker import execute_probes

CONTROL = '''\
import torch
import torch.nn as nn

TRICK = ""
exec(TRICK)


class Unit(nn.Module):
    def forward(self, x):
        # YOUR CODE STARTS HERE
        s = x @ x.transpose(1, 2)
        out = s @ x
        return out
        # YOUR CODE ENDS HERE
'''
# An attack: whatever builtins holds that looks like a recorder is
# wrapped so that every line is recorded as binding no tensor.
BUILTINS = """
import builtins


class Wrapper:
    def __init__(self, real):
        self.real = real

    def bound(self, line, *values):
        return self.real.bound(line)

    def returned(self, line, value):
        self.real.bound(line)
        return value

    def entered(self, line):
        return self.real.entered(line)


for name, value in list(vars(builtins).items()):
    if name.startswith("_autograder") or hasattr(value, "entered"):
        setattr(builtins, name, Wrapper(value))
        FOUND.append(name)
"""
# The same, on the recorder found in the code's own constants: each
# function's code is replaced by a copy whose recorder calls drop the
# values.
CONSTANTS = """
import types


def wrap(real):
    def fake(line, *values):
        real(line)
        return values[0] if values else None
    return fake


def rewrite(function):
    code = function.__code__
    consts = tuple(wrap(c) if callable(c) and not isinstance(c, type)
                   else c for c in code.co_consts)
    if consts != code.co_consts:
        function.__code__ = code.replace(co_consts=consts)
        FOUND.append(function.__name__)


import sys
module = sys.modules[__name__]


class Later:
    def __set_name__(self, owner, name):
        pass


def patch_classes():
    for value in list(vars(module).values()):
        if isinstance(value, type):
            for item in list(vars(value).values()):
                if isinstance(item, types.FunctionType):
                    rewrite(item)


PATCH = patch_classes
"""


def _source(trick: str) -> str:
    source = CONTROL.replace('TRICK = ""', f"TRICK = {trick!r}")
    source = source.replace("exec(TRICK)", "FOUND = []\nexec(TRICK)")
    if "PATCH" in trick:     # after the class exists
        source += "\nPATCH()\n"
    return source


def _traced(source: str, nonce: int = 4321):
    probe = Probe("t", "Unit", {}, args=[torch.ones(2, 3, 4)],
                  trace_shapes=True, methods={"Unit": ("forward",)},
                  canary=nonce)
    [result] = execute_probes(source, "unit.py", [probe])
    assert result.ok, result.message
    return result


def _trace(source: str, nonce: int = 4321):
    return _traced(source, nonce).shapes


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1)
                if text in line)


def test_the_control_trace_is_evidence():
    shapes = _trace(_source(""))
    assert trace_problem(_source(""), "Unit", 4321, shapes) is None
    assert shapes[_line(_source(""), "out = s @ x")] == [[[2, 3, 4]]]


def test_builtins_hold_no_recorder():
    source = _source(BUILTINS)
    before = set(vars(builtins))
    shapes = _trace(source)
    assert not [n for n in vars(builtins) if "autograder" in n]
    assert set(vars(builtins)) - before == set()
    # Nothing was found to wrap: the trace is the control's.
    assert shapes == _trace(_source(""))
    assert trace_problem(source, "Unit", 4321, shapes) is None


def test_a_recorder_wrapped_from_the_code_constants_is_refused():
    source = _source(CONSTANTS)
    # The refused calls said so as they were made: no later call undoes
    # it (the records streamed, the parent's table: shape_table.py).
    assert _traced(source).trace_forged == REFUSED
    assert _traced(_source("")).trace_forged == ""     # the control


FORGED = """
def forge(module):
    for const in type(module).forward.__code__.co_consts:
        if callable(const) and not isinstance(const, type):
            const(LINE)     # "this line bound no tensor"
"""


def test_a_record_forged_from_other_code_or_line_is_refused():
    source = CONTROL.replace(
        '        out = s @ x\n',
        '        out = s @ x\n        FORGE(self)\n')
    line = _line(source, "out = s @ x")
    trick = FORGED.replace("LINE", str(line))
    source = source.replace('TRICK = ""', f"TRICK = {trick!r}").replace(
        "exec(TRICK)", "exec(TRICK)\nFORGE = forge")
    assert _traced(source).trace_forged == REFUSED
    # Its control: the same call site with no forging passes.
    honest = source.replace("FORGE = forge", "FORGE = print")
    shapes = _trace(honest.replace("FORGE(self)", "FORGE(end='')"))
    assert CANARY_LINE in shapes
