"""Record the values of the tensors a submission's statements bind, in
execution order, for the diagnosis of a failing case (``Probe.trace_values``).

Runs in the worker, beside the shape recorder: the submission is imported a
third time, instrumented by the same AST pass as for shapes and loaded the
same way (``shape_recorder.load_traced``) but calling this recorder,
linked into the compiled code as the shape recorder is
(``shape_recorder.link``: no name in builtins, a call from other code
refused). Only float tensors are kept, and only within fixed caps (count,
elements each, elements in all): what travels back is bounded whatever
the code does, and the wire checks the same caps. Fused attention calls
are recorded with their arguments beside the values
(``fused_recorder``).
"""
from __future__ import annotations

import secrets
from typing import Any

import torch

from autograder.sandbox.fused_recorder import FusedRecorder
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.probe_runner import run_probe
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.sandbox.safe_type import is_a
from autograder.sandbox.shape_recorder import load_traced


# An earlier state of a tensor changed in place again on the same line:
# dropped when the values are taken.
_DROPPED = torch.empty(0)


class ValueRecorder:
    """Collects ``(line, tensor)`` in execution order: a float32 copy of
    each float tensor a traced statement binds or returns, while armed (an
    empty tensor for one over the caps)."""

    def __init__(self) -> None:
        self.values: list[tuple[int, torch.Tensor]] = []
        self.armed = False
        self.refused = False   # a call the link's guard refused
        self._total = 0
        # (line, id) of a tensor changed in place -> where it was recorded
        self._changed: dict[tuple[int, int], int] = {}
        self._dropped = 0

    def forged(self) -> None:
        """A call the link's guard refused (``shape_recorder.link``):
        nothing recorded; the values diagnose, they grade nothing."""
        self.refused = True

    def reset(self, canary: Any = None) -> None:
        """Forget what was recorded (the worker's probe API)."""
        self.values, self._total, self._changed = [], 0, {}
        self._dropped = 0

    def take(self) -> list[tuple[int, torch.Tensor]]:
        """What was recorded, and forget it."""
        found, self.values, self._total = self.values, [], 0
        self._changed, self._dropped = {}, 0
        return [(line, t) for line, t in found if t is not _DROPPED]

    def bound(self, line: int, *values: Any) -> None:
        """Record the tensors among the values a statement just bound."""
        for value in values:
            self._keep(line, value)

    def changed(self, line: int, value: Any) -> None:
        """Record a tensor a statement changed in place; a loop changing
        the same tensor on the same line keeps only its last state, where
        it was last changed (the walk compares what the loop leaves, not
        each pass)."""
        key = (line, id(value))
        earlier = self._changed.pop(key, None)
        if earlier is not None:
            self._total -= self.values[earlier][1].numel()
            self.values[earlier] = (line, _DROPPED)
            self._dropped += 1
        count = len(self.values)
        self._keep(line, value)
        if len(self.values) > count:
            self._changed[key] = count

    def returned(self, line: int, value: Any) -> Any:
        """Record the tensor(s) of a return value and pass it through."""
        items = value if is_a(value, (tuple, list)) else (value,)
        for item in items[:4]:
            self._keep(line, item)
        return value

    def entered(self, line: int) -> None:
        """A function of the submission was called: nothing to record."""

    def _keep(self, line: int, value: Any) -> None:
        live = len(self.values) - self._dropped
        if not self.armed or live >= LIMITS.values or \
                len(self.values) >= 8 * LIMITS.values or \
                type(value) is not torch.Tensor:   # no subclasses
            return
        try:
            if not value.is_floating_point() or value.is_sparse:
                return
            size = value.numel()
            if size == 0:
                return
            if size > LIMITS.value_numel or \
                    self._total + size > LIMITS.values_numel:
                # An empty tensor marks a value not kept: the walk cannot
                # tell what happened there, and stops.
                self.values.append((int(line), torch.empty(0)))
                return
            copy = value.detach().to("cpu", torch.float32).clone() \
                .contiguous()
        except Exception:   # noqa: BLE001 - a tensor that resists: skip it
            return
        self._total += size
        self.values.append((int(line), copy))


def install() -> tuple[ValueRecorder, str]:
    """A new value recorder and the random prefix of the placeholder
    constants through which its traced copy calls it
    (``shape_recorder.link``); no module holds it (see
    ``shape_recorder.install_recorder``)."""
    return ValueRecorder(), f"values-{secrets.token_hex(8)}"


class ValueTracedModule:
    """The submission imported with every statement's values recorded."""

    def __init__(self, source: str, filename: str,
                 methods: dict[str, tuple[str, ...]],
                 installed: tuple[ValueRecorder, str] | None = None):
        self.recorder, prefix = installed or install()
        self.module = load_traced(source, filename, methods, self.recorder,
                                  prefix, inplace=True)


def run_traced(traced: ValueTracedModule, probe: Probe,
               filename: str) -> ProbeResult:
    """The probe run on the value-traced copy, armed for the whole probe;
    the result carries the recorded values."""
    recorder = traced.recorder
    recorder.take()
    recorder.armed = True
    fused = FusedRecorder(filename)
    try:
        with fused:
            result = run_probe(traced.module, probe, filename)
    finally:
        recorder.armed = False
    result.values = recorder.take()
    result.fused = fused.calls
    return result
