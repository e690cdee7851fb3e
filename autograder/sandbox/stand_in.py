"""The stand-in class a probe puts in place of one of the submission's
own classes (``Probe.stand_in``): built as expected, it returns known
tensors, so that a check judges one class on correct inputs from the
others."""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn as nn

from autograder.sandbox.protocol import Probe, stand_in_output
from autograder.sandbox.safe_type import is_a, type_name
from autograder.sandbox.student_module import MODULE_NAME


def stand_in_class(probe: Probe, real: Any) -> type:
    """The module class standing in for ``probe.stand_in.cls`` (see
    ``Probe.stand_in``): built as expected, called on the probe's input,
    its k-th instance returns the k-th known tensor."""
    spec = probe.stand_in
    assert spec is not None, "a stand-in class for a probe without one"
    name, want = spec.cls, dict(spec.init)
    shape = list(spec.shape)
    expected = probe.args[0] if probe.args else None
    try:
        signature = inspect.signature(real) if isinstance(real, type) \
            else None
    except Exception:   # noqa: BLE001 - a hostile class: bind by position
        signature = None
    made = [0]

    class StandIn(nn.Module):
        """Known outputs in place of the submission's own class."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()
            got = _bind(signature, list(want), args, kwargs)
            # Every argument that differs, in one message: the parent
            # reads which (kinds/size.py), so a swap shows as one.
            wrong = [(key, got[key], value) for key, value in want.items()
                     if key in got and got[key] != value]
            if wrong:
                raise TypeError(
                    f"{name} was built with " + ", ".join(
                        f"{k}={g!r}" for k, g, _ in wrong) + "; expected " +
                    ", ".join(f"{k}={v!r}" for k, _, v in wrong))
            self.index = made[0]
            made[0] += 1

        def forward(self, x: Any) -> torch.Tensor:
            if expected is not None and not (
                    is_a(x, torch.Tensor)
                    and x.shape == expected.shape
                    and bool(torch.equal(x, expected))):
                what = (f"a tensor of shape {list(x.shape)}"
                        if is_a(x, torch.Tensor) else
                        f"a {type_name(x)}")
                raise ValueError(f"a {name} was called on {what} that is "
                                 f"not the input x: run every head on x")
            return stand_in_output(probe.drawn_seed, self.index, shape)

    # Named and placed as the class it replaces: code that looks for the
    # grader's module cannot tell (the checks also judge with the real
    # class wherever it is right: checks/heads.py, checks/size.py).
    StandIn.__name__ = StandIn.__qualname__ = name
    StandIn.__module__ = str(getattr(real, "__module__", MODULE_NAME))
    StandIn.__doc__ = getattr(real, "__doc__", None)
    return StandIn


def _bind(signature: inspect.Signature | None, names: list[str],
          args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor's arguments by name: bound to the real class's
    signature when it binds, else positionally to ``names``."""
    if signature is not None:
        try:
            bound = signature.bind(None, *args, **kwargs) if list(
                signature.parameters)[:1] == ["self"] else \
                signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)
        except (TypeError, ValueError):
            pass
    return {**dict(zip(names, args)), **kwargs}
