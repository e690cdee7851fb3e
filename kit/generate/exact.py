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
  powers torch computes with products, divisions and sqrt;
- ``sum``, ``mean``, ``var`` and ``std`` of a floating tensor (a
  hand-written LayerNorm): sums in index order, dimension by dimension;
  the variance in two passes (the mean, then the mean square deviation);
- ``F.layer_norm`` (``nn.LayerNorm``): the same mean and biased variance
  over the normalised dimensions, ``(x - mean) / sqrt(var + eps)``, then
  the weight and bias;
- ``log`` (a cross-entropy): :func:`_log`, the exponent from the bits and
  2 atanh((m - 1) / (m + 1)) of the mantissa as a series; ``log_softmax``
  as the shifted scores minus the log of their :func:`_exp` sum;
- ``tanh``, ``erf`` and ``F.gelu`` (``nn.GELU``, both its erf form and
  ``approximate="tanh"``): :func:`_tanh` from :func:`_exp` (and a Taylor
  polynomial of expm1 near 0), :func:`_erf_erfc` from a series (|z| < 1)
  or a continued fraction (|z| >= 1) of erf; GELU's ``1 + erf`` and
  ``1 + tanh`` of a negative argument are taken from erfc and exp, not
  from a difference that would cancel.

Stated accuracy in float64 (kit_tests/test_exact.py measures it): exp, sin,
cos ~1 ulp; log within 2 ulps; tanh and erf within 1e-15 relative of the C
library, erfc within 3e-15 (0 below exp(UNDERFLOW), as exp); GELU within
4e-15 relative for |x| <= 3 and 2e-15 absolute everywhere (beyond, the
rounding of its own argument dominates, as in torch); sums, means,
variances and LayerNorm within 1e-13 of torch's own. These are float64
errors, rounded once to float32: what :func:`exact` promises is the same
bits on every CPU, not torch's bits.

Any other reducing or transcendental operation raises inside :func:`exact`
(:data:`REFUSED`, every function named in :data:`REFUSED_NAMES`, in
whatever form: ``torch.tan``, ``Tensor.tan_``, ``torch.special.expit``;
and every ``torch.nn.functional`` function not in :data:`F_ELEMENTWISE`,
whose inner calls the mode would not see), so nothing CPU-dependent can
slip in unnoticed.
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


# log: x = m 2**e with m in [sqrt(1/2), sqrt(2)), s = (m - 1) / (m + 1)
# (|s| < 0.172), log m = 2 (s + s^3/3 + s^5/5 + ...): terms in s^2 up to
# LOG_TERMS (the first left out is below 1e-19 of the result).
LOG_TERMS = [1.0 / (2 * k + 1) for k in range(15)]
SQRT2 = math.sqrt(2.0)
# Below this (subnormal) the exponent's bits do not give x = m 2**e.
LOG_TINY = 2.0 ** -1022


def _log(x: torch.Tensor) -> torch.Tensor:
    """log(x) to ~2 ulps from elementwise float64 operations and the
    exponent's bits: -inf at 0, nan below 0 (as torch)."""
    if (x.abs() < LOG_TINY).logical_and(x != 0).any():
        raise ValueError("exact log of a subnormal number")
    dtype, x = x.dtype, x.to(torch.float64)
    normal = torch.isfinite(x) & (x > 0)
    safe = torch.where(normal, x, torch.ones_like(x))
    bits = safe.view(torch.int64)
    e = ((bits >> 52) & 0x7FF) - 1023
    m = ((bits & ((1 << 52) - 1)) | (1023 << 52)).view(torch.float64)
    high = m >= SQRT2
    m = torch.where(high, m / 2, m)                  # exact
    e = (e + high.to(torch.int64)).to(torch.float64)
    s = (m - 1) / (m + 1)
    log_m = 2 * s * _horner(LOG_TERMS, s * s)
    found = e * LN2_HI + (log_m + e * LN2_LO)
    found = torch.where(x == 0, torch.full_like(x, -math.inf), found)
    found = torch.where(x < 0, torch.full_like(x, math.nan), found)
    found = torch.where(torch.isposinf(x), x, found)
    return torch.where(torch.isnan(x), x, found).to(dtype)


def _log_softmax(t: torch.Tensor, dim: int) -> torch.Tensor:
    shifted = t - t.amax(dim=dim, keepdim=True)
    return shifted - _log(_sum(_exp(shifted), dim % t.dim()))


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


# Terms of the series and depth of the continued fraction of erf below:
# enough for full float64 accuracy (the first term left out is < 1e-17).
ERF_SERIES_TERMS = 40
ERFC_FRACTION_DEPTH = 200
ERF_SPLIT = 1.0
# Taylor coefficients of expm1(r) / r, for |r| <= 1/2 (tanh near 0).
EXPM1_TAYLOR = [1.0 / math.factorial(i + 1) for i in range(20)]
TANH_SMALL = 0.25
SQRT_PI = math.sqrt(math.pi)
# GELU's constants as torch writes them (M_SQRT1_2; M_SQRT2 * M_2_SQRTPI / 2
# and 0.044715 for the tanh form).
GELU_SQRT1_2 = math.sqrt(0.5)
GELU_TANH_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
GELU_TANH_KAPPA = 0.044715


def _tanh(u: torch.Tensor) -> torch.Tensor:
    """tanh(u) to ~1 ulp: (1 - e) / (1 + e) with e = exp(-2|u|), and near 0
    -expm1(-2|u|) / (2 + expm1(-2|u|)) so that nothing cancels."""
    a = u.abs()
    e = _exp(-2 * a)
    r = -2 * torch.where(a < TANH_SMALL, a, torch.zeros_like(a))
    em1 = r * _horner(EXPM1_TAYLOR, r)
    found = torch.where(a < TANH_SMALL, -em1 / (2 + em1), (1 - e) / (1 + e))
    found = torch.where(torch.isnan(u), u, found)
    return torch.where(u < 0, -found, found)


def _exp_minus_square(a: torch.Tensor) -> torch.Tensor:
    """exp(-a^2) for a >= 0 without the rounding of a^2: a = hi + lo with
    hi on a 2**-20 grid (hi^2 is then exact below 2**6), and exp(-hi^2)
    exp(-lo (2 hi + lo))."""
    hi = torch.floor(a * 2.0 ** 20) * 2.0 ** -20
    lo = a - hi
    return _exp(-hi * hi) * _exp(-lo * (2 * hi + lo))


def _erf_erfc(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(erf |z|, erfc |z|): for |z| < 1 the series 2a/sqrt(pi) exp(-a^2)
    sum (2a^2)^n / (2n+1)!! (positive terms, nothing cancels), for |z| >= 1
    erfc's continued fraction exp(-a^2)/sqrt(pi) / (a + 1/2/(a + 1/(a +
    3/2/(a + ...)))), both evaluated from the innermost term outwards."""
    a = z.abs()
    small = torch.where(a < ERF_SPLIT, a, torch.zeros_like(a))
    large = torch.where(a < ERF_SPLIT, torch.full_like(a, ERF_SPLIT), a)
    x = 2 * small * small
    series = torch.ones_like(a)
    for n in range(ERF_SERIES_TERMS, 0, -1):
        series = 1 + x / (2 * n + 1) * series
    erf_small = 2 * small / SQRT_PI * _exp_minus_square(small) * series
    fraction = large.clone()
    for k in range(ERFC_FRACTION_DEPTH, 0, -1):
        fraction = large + (k / 2) / fraction
    erfc_large = _exp_minus_square(large) / SQRT_PI / fraction
    erfc_large = torch.where(torch.isinf(large), torch.zeros_like(a),
                             erfc_large)
    erf = torch.where(a < ERF_SPLIT, erf_small, 1 - erfc_large)
    erfc = torch.where(a < ERF_SPLIT, 1 - erf_small, erfc_large)
    return (torch.where(torch.isnan(z), z, erf),
            torch.where(torch.isnan(z), z, erfc))


def _erf(z: torch.Tensor) -> torch.Tensor:
    erf = _erf_erfc(z)[0]
    return torch.where(z < 0, -erf, erf)


def _gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """x P(X <= x): 0.5 x (1 + erf(x / sqrt 2)), or with approximate="tanh"
    0.5 x (1 + tanh(beta (x + kappa x^3))); ``1 + f`` of a negative
    argument is erfc(|z|), or 2 e / (1 + e) with e = exp(-2|u|)."""
    if approximate == "tanh":
        u = GELU_TANH_BETA * (x + GELU_TANH_KAPPA * x * x * x)
        e = _exp(-2 * u.abs())
        one_plus = torch.where(u < 0, 2 * e / (1 + e), 1 + _tanh(u))
    elif approximate == "none":
        z = x * GELU_SQRT1_2
        erf, erfc = _erf_erfc(z)
        one_plus = torch.where(z < 0, erfc, 1 + erf)
    else:
        raise RuntimeError(f"gelu with approximate={approximate!r}: only "
                           f"'none' and 'tanh' exist")
    return 0.5 * x * one_plus


def _dims(t: torch.Tensor, dim: Any) -> list[int]:
    """``dim`` (None, an int or a sequence) as sorted non-negative ints."""
    if dim is None:
        return list(range(t.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(t.dim(), 1) for d in dims})


def _reduce(t: torch.Tensor, dim: Any, keepdim: bool) -> torch.Tensor:
    """Sum over ``dim`` (see :func:`_dims`), each dimension in index order,
    the lowest first."""
    dims = _dims(t, dim)
    total = t.reshape(1) if t.dim() == 0 else t
    for d in dims:
        total = _sum(total, d)
    if not keepdim:
        total = total.reshape([n for i, n in enumerate(total.shape)
                               if i not in dims])
    return total.reshape(t.shape) if t.dim() == 0 else total


def _count(t: torch.Tensor, dim: Any) -> int:
    return math.prod(t.shape[d] for d in _dims(t, dim)) if t.dim() else 1


def _variance(t: torch.Tensor, dim: Any, correction: float,
              keepdim: bool) -> torch.Tensor:
    """Two passes: the mean, then the sum of squared deviations divided by
    ``count - correction``."""
    mean = _reduce(t, dim, keepdim=True) / _count(t, dim)
    deviation = t - mean
    return (_reduce(deviation * deviation, dim, keepdim)
            / (_count(t, dim) - correction))


def _reduction(name: str, args: tuple, kwargs: dict) -> torch.Tensor:
    """``sum``, ``mean``, ``var`` or ``std`` with torch's signatures:
    (input, dim=None, keepdim=False, dtype=) for sum and mean; (input,
    dim=None, unbiased=True, keepdim=False, correction=) for var and std,
    where a bool second argument is ``unbiased``."""
    t, rest = args[0], list(args[1:])
    if rest and isinstance(rest[0], (bool, torch.dtype)):
        kwargs = {**kwargs, "dtype": rest.pop(0)} if isinstance(
            rest[0], torch.dtype) else kwargs
        rest.insert(0, None)
    dim = kwargs.get("dim", kwargs.get("axis", rest[0] if rest else None))
    if name in ("sum", "mean"):
        keepdim = kwargs.get("keepdim", rest[1] if len(rest) > 1 else False)
        if kwargs.get("dtype") is not None:
            t = t.to(kwargs["dtype"])
        total = _reduce(t, dim, keepdim)
        return total if name == "sum" else total / _count(t, dim)
    unbiased = kwargs.get("unbiased", rest[1] if len(rest) > 1 else True)
    keepdim = kwargs.get("keepdim", rest[2] if len(rest) > 2 else False)
    correction = kwargs.get("correction")
    correction = (1 if unbiased else 0) if correction is None else correction
    found = _variance(t, dim, correction, keepdim)
    return found if name == "var" else found.sqrt()


def _layer_norm(x: torch.Tensor, normalized_shape: Any,
                weight: torch.Tensor | None = None,
                bias: torch.Tensor | None = None,
                eps: float = 1e-5, cudnn_enable: bool = True) -> torch.Tensor:
    """F.layer_norm (and torch.layer_norm, whose last argument is
    ``cudnn_enable``): mean and biased variance over the last
    ``len(normalized_shape)`` dimensions, then the weight and bias."""
    count = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    dims = list(range(x.dim() - count, x.dim()))
    mean = _reduce(x, dims, keepdim=True) / _count(x, dims)
    found = (x - mean) / (_variance(x, dims, 0, keepdim=True) + eps).sqrt()
    if weight is not None:
        found = found * weight
    return found if bias is None else found + bias


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
LOG = {torch.log, torch.Tensor.log}
LOG_SOFTMAX = {torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax}
# Reductions and transcendental functions the values never need: refuse
# them rather than let a CPU-dependent kernel in.
REFUSED = {torch.einsum, torch.sum, torch.Tensor.sum, torch.mean,
           torch.Tensor.mean, torch.mm, torch.Tensor.mm, torch.addmm,
           torch.baddbmm, torch.exp, torch.Tensor.exp, torch.logsumexp,
           torch.cumsum, torch.prod, torch.norm, torch.sigmoid,
           F.scaled_dot_product_attention}
REDUCTIONS = {torch.sum: "sum", torch.Tensor.sum: "sum",
              torch.mean: "mean", torch.Tensor.mean: "mean",
              torch.var: "var", torch.Tensor.var: "var",
              torch.std: "std", torch.Tensor.std: "std"}
TANH = {torch.tanh, torch.Tensor.tanh}
ERF = {torch.erf, torch.Tensor.erf, torch.special.erf}
ERFC = {torch.erfc, torch.Tensor.erfc, torch.special.erfc}
LAYER_NORM = {F.layer_norm, torch.layer_norm}
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
    "scaled_dot_product_attention", "polar", "angle",
    "layer_norm", "native_layer_norm", "group_norm", "native_group_norm",
    "batch_norm", "native_batch_norm", "instance_norm", "rms_norm",
    "normalize", "local_response_norm", "conv1d", "conv2d", "conv3d",
    "convolution", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "bilinear", "trapz", "trapezoid",
    "cumulative_trapezoid", "chain_matmul", "matrix_power", "renorm",
    "var_mean", "std_mean", "erfcx", "ndtr", "ndtri", "log_ndtr", "i0",
    "i0e", "i1", "i1e", "logsigmoid", "softmin", "hardswish", "tanhshrink"}
# torch.nn.functional's Python functions call torch again inside, where
# this mode no longer sees the calls: only these (elementwise, copying or
# random, nothing reduced or transcendental) may run inside exact(); the
# mode itself computes linear, softmax, layer_norm and gelu.
F_ELEMENTWISE = {
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout", "relu", "relu_", "relu6", "leaky_relu",
    "leaky_relu_", "hardtanh", "hardtanh_", "threshold", "threshold_",
    "hardshrink", "softshrink", "softsign", "prelu", "pad", "one_hot",
    "embedding", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
    "native_channel_shuffle", "has_torch_function", "handle_torch_function",
    "has_torch_function_unary", "has_torch_function_variadic"}


def _refusal(func: Any) -> str | None:
    """Why ``func`` may not run inside :func:`exact`, or None."""
    name = getattr(func, "__name__", "").strip("_").removeprefix("special_")
    if (getattr(func, "__module__", None) == F.__name__
            and name not in F_ELEMENTWISE):
        return ("a torch.nn.functional function whose inner reductions or "
                "transcendental calls kit/generate/exact.py cannot see")
    if (func in REFUSED or name.removesuffix("_") in REFUSED_NAMES
            or name.startswith(("linalg_", "fft_"))):
        return ("it reduces or calls the C library, whose last bits "
                "depend on the CPU kernel, and kit/generate/exact.py has no "
                "exact form of it")
    return None


def _computed(func: Any, args: tuple, kwargs: dict) -> Any:
    """The exact value of a reduction, LayerNorm, tanh, erf or GELU call
    on floating tensors, or None when ``func`` is none of them."""
    if func in REDUCTIONS and args:
        if not args[0].is_floating_point():
            return func(*args, **kwargs)      # integer sums are exact
        return _reduction(REDUCTIONS[func], args, kwargs)
    if func in LAYER_NORM:
        return _layer_norm(*args, **kwargs)
    if func in TANH and not kwargs:
        return _tanh(args[0])
    if func in ERF and not kwargs:
        return _erf(args[0])
    if func in ERFC and not kwargs:
        erfc = _erf_erfc(args[0])[1]
        return torch.where(args[0] < 0, 2 - erfc, erfc)
    if getattr(func, "__name__", "") == "gelu":
        approximate = kwargs.get("approximate",
                                 args[1] if len(args) > 1 else "none")
        return _gelu(args[0], approximate)
    return None


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
        if func in LOG_SOFTMAX:
            return _log_softmax(args[0], _dim(args, kwargs))
        if func in LOG and not kwargs:
            return _log(args[0])
        if func in SIN and not kwargs:
            return _sin_cos(args[0])[0]
        if func in COS and not kwargs:
            return _sin_cos(args[0])[1]
        if func in POW and not kwargs:
            return _pow(func, args)
        found = _computed(func, args, kwargs)
        if found is not None:
            return found
        why = _refusal(func)
        if why is not None:
            raise RuntimeError(f"{getattr(func, '__name__', func)} is not "
                               f"exact across CPUs: not allowed here ({why})")
        return func(*args, **kwargs)


@contextmanager
def exact() -> Iterator[None]:
    """Run torch code with CPU-independent float64 products, sums and
    softmax (see the module docstring)."""
    with _Exact():
        yield
