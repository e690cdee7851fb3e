"""What a module's first call changed in its own state: snapshots of its
parameters, buffers and plain attributes, and the paths that differ."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from autograder.sandbox.limits import LIMITS
from autograder.sandbox.safe_type import is_a, type_name

# What every nn.Module has (hooks, flags): not the student's state.
_MODULE_INTERNALS = frozenset(vars(nn.Module())) - {
    "_parameters", "_buffers"}


def state_snapshot(module: nn.Module) -> dict[str, Any]:
    """Path -> a copy of every parameter, buffer and plain attribute of
    ``module`` and its submodules (``mask``, ``heads.0.calls``); tensors
    are cloned, other objects reduced to what shows a change. Empty if
    the module resists being read (it is only used to name a cause)."""
    found: dict[str, Any] = {}
    try:
        for prefix, sub in module.named_modules():
            dot = f"{prefix}." if prefix else ""
            for name, value in vars(sub).items():
                if name in ("_parameters", "_buffers"):
                    for key, tensor in value.items():
                        found[dot + key] = _frozen(tensor)
                elif name not in _MODULE_INTERNALS and \
                        not is_a(value, nn.Module):
                    found[dot + name] = _frozen(value)
    except Exception:   # noqa: BLE001 - hostile attributes: name nothing
        return {}
    return found


def _frozen(value: Any) -> Any:
    if is_a(value, torch.Tensor):
        return value.detach().clone()
    if type(value) in (int, float, bool, str, type(None)):
        return value
    if type(value) in (list, tuple, dict, set):
        return (type_name(value), len(value))
    return (type_name(value), id(value))


def changed_state(before: dict[str, Any], after: dict[str, Any]
                  ) -> list[str]:
    """The paths whose value differs between two snapshots, at most
    ``LIMITS.changed_names``; one the first call created ends with " (new)"."""
    changed = []
    try:
        for path in sorted(set(before) | set(after)):
            if path not in before:
                changed.append(f"{path} (new)")
            elif path not in after or not _same(before[path], after[path]):
                changed.append(path)
    except Exception:   # noqa: BLE001 - hostile values: name what we have
        pass
    return changed[:LIMITS.changed_names]


def _same(a: Any, b: Any) -> bool:
    if is_a(a, torch.Tensor) or is_a(b, torch.Tensor):
        if not (is_a(a, torch.Tensor) and is_a(b, torch.Tensor)
                and a.shape == b.shape and a.dtype == b.dtype):
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return bool(torch.equal(a, b))
    if is_a(a, float) and is_a(b, float) and a != a and b != b:
        return True   # NaN
    return type(a) is type(b) and a == b
