"""Build a submission's module without random weights that are then
overwritten (runs in the worker, on student classes).

A probe builds the student's module and then loads the case's weights
into it. ``nn.Linear`` draws random weights in its constructor; for the
GPT-2-size modules of Task 3.4 that is most of a submission's probe time,
and those draws are overwritten at once. ``build`` runs the constructor
with ``nn.Linear.reset_parameters`` deferred and keeps the result only when
that is invisible:

- the probe never calls the module (attribute inspection reads shapes and
  types, never values), or
- nothing else drew random numbers during the constructor and every
  deferred layer's weight and bias are tensors the probe's weights
  overwrite.

Otherwise the deferred draws are made now, in the constructor's order
from the generator state it started with (the same values it would have
drawn), or, if the constructor drew other random numbers or swapped a
layer's tensors, it runs again normally. The constructor itself is the
student's, unchanged: only ``nn.Linear``'s own initialisation waits.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.nn as nn

# Below this many weight elements a probe builds as usual: the draws cost
# less than the bookkeeping.
MIN_ELEMENTS = 100_000
_reset_parameters = nn.Linear.reset_parameters


@contextmanager
def _deferred_linear_init(deferred: list) -> Iterator[None]:
    def defer(layer: nn.Linear) -> None:
        deferred.append((layer, layer.weight, layer.bias))

    nn.Linear.reset_parameters = defer
    try:
        yield
    finally:
        nn.Linear.reset_parameters = _reset_parameters


def worth_it(call: bool, sizes: Iterable[int]) -> bool:
    """Whether a probe should try the fast build: it inspects only, or
    it loads at least MIN_ELEMENTS weight elements."""
    return not call or sum(sizes) >= MIN_ELEMENTS


def build(construct: Callable[[], Any], *, call: bool,
          paths: Iterable[str]) -> Any:
    """``construct()`` (the student's constructor) with nn.Linear's random
    initialisation skipped where the probe overwrites it or never looks at
    it (see the module docstring). ``call``: the probe calls the module;
    ``paths``: the attribute paths of the weights it then loads."""
    generator = torch.default_generator
    before = generator.get_state()
    deferred: list = []
    try:
        with _deferred_linear_init(deferred):
            instance = construct()
    except Exception:   # noqa: BLE001 - as it would have raised normally
        generator.set_state(before)
        return construct()
    if not deferred or not call:
        return instance
    drew = not torch.equal(generator.get_state(), before)
    if not drew and isinstance(instance, nn.Module):
        loaded = _loaded_tensors(instance, paths)
        if all(id(t) in loaded for layer, _, _ in deferred
               for t in (layer.weight, layer.bias) if t is not None):
            return instance
        if all(layer.weight is weight and layer.bias is bias
               for layer, weight, bias in deferred):
            for layer, _, _ in deferred:   # the draws it would have made
                _reset_parameters(layer)
            return instance
    generator.set_state(before)
    return construct()


def _loaded_tensors(module: nn.Module, paths: Iterable[str]) -> set[int]:
    found = set()
    for path in paths:
        obj: Any = module
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except Exception:   # noqa: BLE001 - loading will say what is wrong
            continue
        if isinstance(obj, torch.Tensor):
            found.add(id(obj))
    return found


__all__ = ["MIN_ELEMENTS", "build", "worth_it"]
