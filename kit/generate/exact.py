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
  sum in index order;
- ``sin`` and ``cos`` (rotary embeddings): :func:`_sin_cos` (range
  reduction by pi/2 and Taylor polynomials);
- ``number ** tensor`` (a frequency schedule such as 10000 ** (-2i/d)):
  :func:`_exp` of ``tensor * log(number)``; ``tensor ** p`` only for the
  powers torch computes with products, divisions and sqrt.

Any other reducing or transcendental operation raises inside :func:`exact`
(:data:`REFUSED`, and every function named in :data:`REFUSED_NAMES`, in
whatever form: ``torch.tan``, ``Tensor.tan_``, ``torch.special.expit``),
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


# pi/2 split as in fdlibm (pio2_1, pio2_1t): n * PIO2_HI is exact for
# |n| < 2**20, so the reduction below loses nothing for |t| < SIN_COS_LIMIT.
PIO2_HI = 1.57079632673412561417e+00
PIO2_LO = 6.07710050650619224932e-11
SIN_COS_LIMIT = 2.0 ** 19
# Taylor coefficients of sin(r) / r and cos(r) in r**2, for |r| <= pi/4: the
# first term left out is below 1e-19 of the result.
SIN_TAYLOR = [(-1) ** k / math.factorial(2 * k + 1) for k in range(11)]
COS_TAYLOR = [(-1) ** k / math.factorial(2 * k) for k in range(11)]
# Powers torch computes with products, divisions and sqrt (correctly
# rounded whatever the kernel); any other needs the C library's pow.
EXACT_POWERS = {0, 1, 2, 3, -1, -2, 0.5, -0.5}


def _horner(coefficients: list[float], x: torch.Tensor) -> torch.Tensor:
    poly = torch.full_like(x, coefficients[-1])
    for coefficient in reversed(coefficients[:-1]):
        poly = poly * x + coefficient
    return poly


def _sin_cos(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin t, cos t) to 2 ulps for |t| < SIN_COS_LIMIT, from elementwise
    float64 operations only: t = n pi/2 + r (Cody and Waite), Taylor
    polynomials of r, and n mod 4 picks the function and the sign."""
    if (t.abs() >= SIN_COS_LIMIT).logical_and(torch.isfinite(t)).any():
        raise ValueError(f"exact sin/cos needs |t| < {SIN_COS_LIMIT:g}")
    n = torch.round(t / (math.pi / 2))
    r = (t - n * PIO2_HI) - n * PIO2_LO              # |r| <= pi/4 (+ulps)
    r2 = r * r
    sin_r, cos_r = r * _horner(SIN_TAYLOR, r2), _horner(COS_TAYLOR, r2)
    quadrant = torch.remainder(torch.nan_to_num(n), 4)
    sin = torch.where(quadrant == 0, sin_r, torch.where(
        quadrant == 1, cos_r, torch.where(quadrant == 2, -sin_r, -cos_r)))
    cos = torch.where(quadrant == 0, cos_r, torch.where(
        quadrant == 1, -sin_r, torch.where(quadrant == 2, -cos_r, sin_r)))
    return torch.where(t == 0, t, sin), cos          # sin(-0) is -0


def _number_pow(base: float, exponent: torch.Tensor) -> torch.Tensor:
    """``base ** exponent`` for a number base > 0, as exp(exponent ln base)
    with :func:`_exp`: ~1 ulp per unit of |exponent ln base|; 0 below
    exp(UNDERFLOW)."""
    if base <= 0:
        raise RuntimeError("exact pow needs a positive base")
    # math.log: one constant, computed by the C library once.
    r = exponent * math.log(base)
    if (r > 700).any():
        raise RuntimeError("exact pow overflows float64")
    return _exp(r)


def _pow(func: Any, args: tuple) -> torch.Tensor:
    base, exponent = args[0], args[1]
    if getattr(func, "__name__", "") == "__rpow__":
        base, exponent = exponent, base
    if isinstance(base, (int, float)) and isinstance(exponent, torch.Tensor):
        return _number_pow(float(base), exponent)
    if isinstance(exponent, (int, float)) and exponent in EXACT_POWERS:
        return func(*args)
    raise RuntimeError(f"pow with exponent {exponent!r} is not exact across "
                       f"CPUs: not allowed here (a number ** tensor, or "
                       f"tensor ** one of {sorted(EXACT_POWERS)})")


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
SIN = {torch.sin, torch.Tensor.sin}
COS = {torch.cos, torch.Tensor.cos}
POW = {torch.pow, torch.Tensor.pow, torch.Tensor.__pow__,
       torch.Tensor.__rpow__}
# Functions that call the C library or a vectorised approximation (SLEEF),
# whose last bits differ between CPU kernels, refused by name so that every
# form (torch.tan, Tensor.tan, Tensor.tan_, F.gelu, torch.special.expit, in
# place or not) is caught; sqrt, rsqrt, +, -, *, / are correctly rounded.
REFUSED_NAMES = {
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "xlogy",
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "arcsin",
    "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "arcsinh", "arccosh", "arctanh", "sinc", "sigmoid", "expit",
    "logit", "erf", "erfc", "erfinv", "lgamma", "digamma", "polygamma",
    "pow", "float_power", "logaddexp", "logaddexp2", "logsumexp", "softplus",
    "gelu", "silu", "mish", "elu", "selu", "celu", "log_softmax",
    "logcumsumexp", "cumprod", "cumsum", "prod", "sum", "mean", "nansum",
    "nanmean", "std", "var", "std_mean", "var_mean", "norm", "dist",
    "cdist", "einsum", "mm", "addmm", "baddbmm", "addbmm", "tensordot",
    "dot", "vdot", "inner", "outer", "mv", "addmv", "cosine_similarity",
    "scaled_dot_product_attention", "polar", "angle"}


def _refused(func: Any) -> bool:
    name = getattr(func, "__name__", "").strip("_").removeprefix("special_")
    return func in REFUSED or name.removesuffix("_") in REFUSED_NAMES


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
        if func in SIN and not kwargs:
            return _sin_cos(args[0])[0]
        if func in COS and not kwargs:
            return _sin_cos(args[0])[1]
        if func in POW and not kwargs:
            return _pow(func, args)
        if _refused(func):
            raise RuntimeError(f"{getattr(func, '__name__', func)} is not "
                               f"exact across CPUs: not allowed here")
        return func(*args, **kwargs)


@contextmanager
def exact() -> Iterator[None]:
    """Run torch code with CPU-independent float64 products, sums and
    softmax (see the module docstring)."""
    with _Exact():
        yield
