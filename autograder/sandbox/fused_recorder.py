"""Record the arguments of fused attention calls
(``torch.nn.functional.scaled_dot_product_attention``) a submission makes
while its value-traced copy runs (``Probe.trace_values``): the call hides
its scores and weights from the value recorder, so the diagnosis needs
what went in (q, k, v, the mask and its kind, is_causal, scale) to replay
the call with one argument fixed (``checks/diagnosis/fused.py``).

A ``TorchFunctionMode`` pushed for the probe only, in the worker. Bounded
like the value recorder: at most ``LIMITS.fused_calls`` calls, each tensor
a float32 copy within ``LIMITS.value_numel`` elements, plain tensors only;
a call it cannot record is passed through unrecorded.
"""
from __future__ import annotations

import math
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import FusedCall

FUSED = F.scaled_dot_product_attention
ARGUMENTS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal",
             "scale")


class FusedRecorder(TorchFunctionMode):
    """Collects a :class:`FusedCall` per fused attention call made from
    ``filename`` (the submission's line that made it)."""

    def __init__(self, filename: str) -> None:
        super().__init__()
        self.filename = filename
        self.calls: list[FusedCall] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is FUSED and len(self.calls) < LIMITS.fused_calls:
            try:
                found = _record(args, kwargs, self._line())
            except Exception:   # noqa: BLE001 - arguments that resist
                found = None
            if found is not None:
                self.calls.append(found)
        return func(*args, **kwargs)

    def _line(self) -> int:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self.filename:
                return max(0, int(frame.f_lineno or 0))
            frame = frame.f_back
        return 0


def _copy(value: Any) -> torch.Tensor | None:
    if type(value) is not torch.Tensor or value.is_sparse or \
            not 0 < value.numel() <= LIMITS.value_numel:
        return None
    if not (value.is_floating_point() or value.dtype == torch.bool):
        return None
    return value.detach().to("cpu", torch.float32).clone().contiguous()


def _record(args: tuple, kwargs: dict, line: int) -> FusedCall | None:
    bound = dict(zip(ARGUMENTS, args))
    bound.update((k, v) for k, v in kwargs.items() if k in ARGUMENTS)
    tensors = [_copy(bound.get(name)) for name in ("query", "key", "value")]
    if any(t is None for t in tensors):
        return None
    mask, kind = bound.get("attn_mask"), ""
    if mask is not None:
        copy = _copy(mask)
        if copy is None:
            return None
        kind = "bool" if mask.dtype == torch.bool else "float"
        tensors.append(copy)
    scale = bound.get("scale")
    if scale is not None:
        scale = float(scale)
        if not math.isfinite(scale):
            return None
    dropout = float(bound.get("dropout_p") or 0.0)
    return FusedCall(line, scale, bool(bound.get("is_causal", False)),
                     dropout if math.isfinite(dropout) else 1.0, kind,
                     tensors)
