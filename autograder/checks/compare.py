"""Compare a student's tensor with the expected one, and say how it differs.

Runs in the grading parent only, on tensors decoded from the worker: student
code can patch torch inside its worker but never these comparisons.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_LISTED = 3   # mismatching positions quoted in a message


@dataclass
class Comparison:
    """The verdict on one tensor.

    ``kind`` is "ok", "shape", "nan" (non-finite values where finite ones
    were expected) or "values"; ``message`` is student-facing and already
    says expected vs got, where and by how much.
    """

    kind: str
    message: str = ""
    max_diff: float = 0.0

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def fmt_shape(shape: torch.Size | list[int] | tuple[int, ...]) -> str:
    """``[3, 5, 9]``."""
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _index(flat: int, shape: torch.Size) -> str:
    return fmt_shape(torch.unravel_index(torch.tensor(flat), shape)) \
        if len(shape) else "[]"


def close(got: torch.Tensor, expected: torch.Tensor, atol: float,
          rtol: float = 0.0, equal_nan: bool = False) -> bool:
    """Same shape and ``|got - expected| <= atol + rtol * |expected|``
    everywhere (our own arithmetic: no torch.allclose a student could have
    patched in a worker we might one day share memory with)."""
    if tuple(got.shape) != tuple(expected.shape):
        return False
    got, expected = got.double(), expected.double()
    both_nan = torch.isnan(got) & torch.isnan(expected)
    same_inf = torch.isinf(expected) & (got == expected)
    within = (got - expected).abs() <= atol + rtol * expected.abs()
    fine = within | same_inf | (both_nan if equal_nan else False)
    return bool(fine.all())


def compare(got: torch.Tensor, expected: torch.Tensor, *, atol: float,
            rtol: float = 0.0, what: str = "output") -> Comparison:
    """Compare ``got`` with ``expected`` and describe the first differences:
    expected vs got at the worst index, the largest absolute difference and
    how many elements are off."""
    if tuple(got.shape) != tuple(expected.shape):
        return Comparison("shape", f"{what} has shape {fmt_shape(got.shape)}"
                          f", expected {fmt_shape(expected.shape)}")
    got64, exp64 = got.double(), expected.double()
    bad_finite = ~torch.isfinite(got64) & torch.isfinite(exp64)
    if bad_finite.any():
        count = int(bad_finite.sum())
        first = int(bad_finite.flatten().nonzero()[0])
        kind = "NaN" if bool(torch.isnan(got64).any()) else "infinite"
        return Comparison(
            "nan", f"{what} contains {kind} values at {count} of "
            f"{got.numel()} positions (first at index "
            f"{_index(first, got.shape)}; expected "
            f"{_fmt(float(exp64.flatten()[first]))})", float("inf"))
    diff = (got64 - exp64).abs()
    diff = torch.where(torch.isinf(exp64) & (got64 == exp64),
                       torch.zeros_like(diff), diff)
    off = diff > atol + rtol * exp64.abs()
    if not off.any():
        return Comparison("ok", "", float(diff.max()) if diff.numel() else 0.)
    worst = int(diff.flatten().argmax())
    count = int(off.sum())
    message = (f"{what} differs at {count} of {got.numel()} positions; "
               f"largest difference {_fmt(float(diff.flatten()[worst]))} at "
               f"index {_index(worst, got.shape)}: expected "
               f"{_fmt(float(exp64.flatten()[worst]))}, got "
               f"{_fmt(float(got64.flatten()[worst]))} (tolerance {atol:g})")
    return Comparison("values", message, float(diff.flatten()[worst]))


def row_factors(got: torch.Tensor, base: torch.Tensor,
                keep: torch.Tensor) -> torch.Tensor | None:
    """The factor of each row (last dimension) that ``got`` is of ``base``
    where ``keep`` holds (the largest ratio there; 0 in a row with none),
    or None where ``got`` is not zero everywhere else."""
    if not bool(keep.any()) or not bool((got[~keep] == 0).all()):
        return None
    ratio = got / base.where(keep, torch.ones_like(base))
    return ratio.where(keep, torch.zeros_like(got)).amax(-1, keepdim=True)


def matching_mistakes(got: torch.Tensor, candidates: dict[str, torch.Tensor],
                      order: list[str], atol: float) -> tuple[str, ...]:
    """Every mistake id (in catalogue ``order``) whose frozen tensor ``got``
    equals within ``atol`` (NaN matching NaN): on some cases two mistakes
    coincide (one head: sqrt(hidden) is sqrt(head_size))."""
    return tuple(m for m in order if candidates.get(m) is not None
                 and close(got, candidates[m], atol, equal_nan=True))
