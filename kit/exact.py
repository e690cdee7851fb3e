"""float64 arithmetic whose every bit is the same on every CPU.

Computing in float64 and rounding once to float32 hides most differences
between CPU kernels, but not all: MKL's matrix products, torch's vectorised
``exp`` and sums differ by a few float64 ulps across AVX2, AVX-512 and the
portable kernels, and one value in ~10^8 then lands on the other side of a
float32 rounding boundary (measured: ~1 chance in 100 for the ~10^6 frozen
values). Elementwise +, -, *, / and comparisons are correctly rounded by
IEEE 754 whatever the kernel, so :func:`exact` runs code (the reference
module itself, unchanged) with the operations that reduce or call ``libm``
replaced by ones built from elementwise operations in a fixed order:

- matrix products (``@``, ``matmul``, ``bmm``, ``F.linear``): a sum over the
  inner dimension, term by term, in index order;
- ``softmax``: max (exact), :func:`_exp` (range reduction by ln 2 and a
  Taylor polynomial, evaluated by Horner's rule; 2**n from its bits), and a
  sum in index order.

Any other reducing or transcendental operation raises inside :func:`exact`,
so nothing CPU-dependent can slip in unnoticed.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# ln 2 split so that n * LN2_HI is exact for |n| < 2**11 (Cody and Waite).
LN2_HI = 0.693145751953125
LN2_LO = 1.4286068203094172321e-06
TAYLOR = [1.0 / math.factorial(i) for i in range(18)]
# exp(r) for r below this is < 1e-86: 0 after rounding to float32, and
# negligible in a softmax (whose largest term is exp(0) = 1).
UNDERFLOW = -200.0


def _exp(r: torch.Tensor) -> torch.Tensor:
    """exp(r) for r <= 0 (a softmax's shifted scores), to ~1 ulp, from
    elementwise float64 operations only."""
    finite = torch.isfinite(r) & (r > UNDERFLOW)
    safe = torch.where(finite, r, torch.zeros_like(r))
    n = torch.round(safe / LN2_HI)
    reduced = (safe - n * LN2_HI) - n * LN2_LO       # |reduced| <= 0.35
    poly = torch.full_like(reduced, TAYLOR[-1])
    for coefficient in reversed(TAYLOR[:-1]):
        poly = poly * reduced + coefficient
    power = ((n.to(torch.int64) + 1023) << 52).view(torch.float64)
    found = poly * power
    found = torch.where(finite, found, torch.zeros_like(found))
    return torch.where(torch.isnan(r), r, found)


def _sum(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim`` in index order, keeping the dimension."""
    total = t.narrow(dim, 0, 1)
    for i in range(1, t.shape[dim]):
        total = total + t.narrow(dim, i, 1)
    return total


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (both at least 2-d, batch dimensions broadcast), summed
    over the inner dimension term by term in index order."""
    if a.dim() < 2 or b.dim() < 2:
        raise ValueError("exact matmul needs 2-d or batched operands")
    total = a[..., :, 0:1] * b[..., 0:1, :]
    for i in range(1, a.shape[-1]):
        total = total + a[..., :, i:i + 1] * b[..., i:i + 1, :]
    return total


def _softmax(t: torch.Tensor, dim: int) -> torch.Tensor:
    shifted = t - t.amax(dim=dim, keepdim=True)
    weights = _exp(shifted)
    return weights / _sum(weights, dim % t.dim())


def _dim(args: tuple, kwargs: dict) -> int:
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if dim is None:
        raise ValueError("exact softmax needs an explicit dim")
    return dim


MATMUL = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__,
          torch.bmm, torch.Tensor.bmm}
SOFTMAX = {torch.softmax, torch.Tensor.softmax, F.softmax}
# Reductions and transcendental functions the values never need: refuse
# them rather than let a CPU-dependent kernel in.
REFUSED = {torch.einsum, torch.sum, torch.Tensor.sum, torch.mean,
           torch.Tensor.mean, torch.mm, torch.Tensor.mm, torch.addmm,
           torch.baddbmm, torch.exp, torch.Tensor.exp, torch.log,
           torch.Tensor.log, torch.log_softmax, torch.Tensor.log_softmax,
           F.log_softmax, torch.logsumexp, torch.cumsum, torch.prod,
           torch.std, torch.var, torch.norm, torch.tanh, torch.sigmoid,
           F.scaled_dot_product_attention}


class _Exact(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in MATMUL:
            return _matmul(*args)
        if func is F.linear:
            x, weight = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            found = _matmul(x, weight.T)
            return found if bias is None else found + bias
        if func in SOFTMAX:
            return _softmax(args[0], _dim(args, kwargs))
        if func in REFUSED:
            raise RuntimeError(f"{getattr(func, '__name__', func)} is not "
                               f"exact across CPUs: not allowed here")
        return func(*args, **kwargs)


@contextmanager
def exact() -> Iterator[None]:
    """Run torch code with CPU-independent float64 products, sums and
    softmax (see the module docstring)."""
    with _Exact():
        yield
