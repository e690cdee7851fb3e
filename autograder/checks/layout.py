"""The expected values in another layout: a returned tensor whose numbers
are all right but whose dims are in another order, or reshaped from such
an order (a `.view` of heads-last numbers as heads-first, say).

A reading is named only when it is proven on the student's own tensor:
undoing it (reshape back, permute back) gives the expected tensor within
the item's tolerance, at every position. Runs in the grading parent on
decoded tensors, like every comparison (checks/compare.py).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from autograder.checks.compare import close, fmt_shape

MAX_RANK = 5          # 120 orders at most: every one is tried
PEEK = 64            # numbers compared before a whole layout
MAX_ELEMENTS = 1 << 18   # the parent's time: larger outputs are not read


@dataclass(frozen=True)
class Reading:
    """A proven layout: the sentence for the student (with the fix) and
    its key for the class report (no sizes: alike on every case)."""

    text: str
    key: str


def reading(got: torch.Tensor, expected: torch.Tensor, atol: float,
            rtol: float = 0.0) -> Reading | None:
    """The layout ``got`` holds the expected values in, and the fix, or
    None when no single layout explains every position (or several do:
    then nothing is claimed). A layout is an order of the expected dims,
    one of them possibly split in two (heads folded into the batch),
    then a reshape to ``got``'s shape."""
    if got.numel() != expected.numel() or got.numel() < 2 or \
            not 0 < expected.dim() < MAX_RANK or \
            expected.numel() > MAX_ELEMENTS:
        return None
    # The same numbers in any order, first: one sort rules out almost
    # every wrong tensor before any layout is tried.
    if not close(got.flatten().sort().values,
                 expected.flatten().sort().values, atol, rtol):
        return None
    index = torch.arange(expected.numel()).reshape(expected.shape)
    head = got.flatten()[:PEEK]
    found: dict[bytes, tuple[tuple[int, ...], tuple[int, ...], bool]] = {}
    for base in _bases(tuple(expected.shape)):
        for order in itertools.permutations(range(len(base))):
            moved = expected.reshape(base).permute(order)
            plain = tuple(moved.shape) == tuple(got.shape)
            candidate = moved if plain else moved.reshape(got.shape)
            # A few numbers first: a wrong layout costs the parent little.
            if not close(head, candidate.flatten()[:PEEK], atol, rtol) or \
                    not close(got, candidate, atol, rtol):
                continue
            # One layout however it is spelled: where each number lands.
            where = index.reshape(base).permute(order).reshape(got.shape)
            found.setdefault(where.numpy().tobytes(),
                             (base, order, not plain))
    if len(found) != 1:
        return None
    base, order, reshaped = next(iter(found.values()))
    if _coincidence(tuple(expected.shape), base, order):
        return None
    split = "" if base == tuple(expected.shape) else ", one dim split"
    key = ("layout: the expected values reshaped" if
           list(order) == sorted(order) else
           f"layout: the expected dims in the order "
           f"{', '.join(map(str, order))}{split}"
           + (", then reshaped" if reshaped else ""))
    return Reading(_sentence(base, order, reshaped, got, expected), key)


def _coincidence(shape: tuple[int, ...], base: tuple[int, ...],
                 order: tuple[int, ...]) -> bool:
    """Whether the order exchanges a piece of a split dim with another dim
    of the same size (a batch of 2 and 2 heads): the tensor would look
    the same had its code exchanged other things, so which dims moved,
    and the fix, are not proven (a case of distinct sizes shows them)."""
    if base == shape:
        return False
    split = next(d for d, (a, b) in enumerate(zip(base, shape)) if a != b)
    pieces = (split, split + 1)
    return any(d != o and base[d] == base[o] and (d in pieces or o in pieces)
               for d, o in enumerate(order))


def _bases(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """``shape``, and ``shape`` with one dim split in two factors > 1."""
    bases = [shape]
    for d, size in enumerate(shape):
        for a in range(2, size):
            if size % a == 0:
                bases.append(shape[:d] + (a, size // a) + shape[d + 1:])
    return bases


def _sentence(base: tuple[int, ...], order: tuple[int, ...],
              reshaped: bool, got: torch.Tensor,
              expected: torch.Tensor) -> str:
    moved = tuple(base[d] for d in order)
    if list(order) == sorted(order):
        return (f"Your values are the expected ones, in order, reshaped to "
                f"{fmt_shape(got.shape)}: return them as "
                f"{fmt_shape(expected.shape)}.")
    orders = ", ".join(str(d) for d in order)
    dims = ("the expected dims" if base == tuple(expected.shape) else
            f"the dims of the expected {fmt_shape(expected.shape)} taken as "
            f"{fmt_shape(base)}")
    fix = _fix(order)
    if not reshaped:
        return (f"Your values are the expected ones with {dims} in the "
                f"order ({orders}): {fix} gives the expected tensor.")
    return (f"Your values are the expected ones laid out "
            f"{fmt_shape(moved)} ({dims} in the order {orders}), then "
            f"reshaped to {fmt_shape(got.shape)} without moving the dims "
            f"back: {fix} before the reshape or view.")


def _fix(order: tuple[int, ...]) -> str:
    """The call that puts dims laid out in ``order`` back in order."""
    swapped = [d for d, o in enumerate(order) if d != o]
    if len(swapped) == 2:
        return f"`.transpose({swapped[0]}, {swapped[1]})`"
    back = sorted(range(len(order)), key=lambda d: order[d])
    return f"`.permute({', '.join(str(d) for d in back)})`"
