"""Random draws that give the same bits on every CPU.

torch's float32 random kernels are vectorised per CPU capability: under
``ATEN_CPU_CAPABILITY=default`` (a CPU without AVX2) ``nn.Linear``'s
initialisation and ``torch.randn`` give values one ulp away from the AVX2 and
AVX-512 kernels. The test values are drawn here instead from torch's seeded
generator through an integer kernel only (``torch.randint``), with float64
arithmetic that is exact, and rounded once to float32: no CPU kernel can
change a bit.

- :func:`linear_init` reproduces ``nn.Linear``'s default initialisation bit
  for bit as torch's AVX2/AVX-512 kernels compute it (same draws, one
  rounding as their fused multiply-add), so ``torch.manual_seed(123)`` still
  gives the book's weights;
- :func:`normal` draws a standard-normal-like input as the sum of twelve
  uniforms minus 6 (Irwin-Hall: mean 0, variance 1), exact in float64.
"""
from __future__ import annotations

import math

import torch
from torch import nn

_BITS = 24   # float32's mantissa: torch's uniform_ keeps 24 random bits


def _draw(count: int) -> torch.Tensor:
    """``count`` 24-bit integers as float64, exactly the bits torch's
    float32 ``uniform_`` would consume (one 32-bit draw each, masked)."""
    return torch.randint(0, 2 ** _BITS, (count,),
                         dtype=torch.int64).double() * 2.0 ** -_BITS


def uniform(shape: tuple[int, ...], bound: float) -> torch.Tensor:
    """float32 ``U(-bound, bound)`` as ``tensor.uniform_(-bound, bound)``
    computes it with a fused multiply-add: ``u * (to - from) + from``, whose
    float64 value is exact (at most 47 significant bits), rounded once."""
    low = torch.tensor(-bound, dtype=torch.float32)
    width = (torch.tensor(bound, dtype=torch.float32) - low).double()
    draws = _draw(math.prod(shape))
    return (draws * width + low.double()).float().reshape(shape)


def linear_init(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter of ``module`` (only ``nn.Linear`` layers may hold
    parameters) as ``nn.Linear.reset_parameters`` draws it from the current
    seed: in registration order, weight (kaiming_uniform_, a = sqrt(5)) then
    bias (U(-1/sqrt(fan_in), 1/sqrt(fan_in)))."""
    found: dict[str, torch.Tensor] = {}
    gain = nn.init.calculate_gain("leaky_relu", math.sqrt(5))
    layers = dict(module.named_modules())
    for name, param in module.named_parameters():
        owner, _, kind = name.rpartition(".")
        layer = layers[owner]
        if not isinstance(layer, nn.Linear):
            raise TypeError(f"{name}: only nn.Linear parameters are drawn")
        fan_in = layer.in_features
        bound = (math.sqrt(3.0) * (gain / math.sqrt(fan_in))
                 if kind == "weight" else 1 / math.sqrt(fan_in))
        found[name] = uniform(tuple(param.shape), bound)
    return found


def normal(*shape: int) -> torch.Tensor:
    """float32 draws of mean 0 and variance 1 (Irwin-Hall of 12 uniforms):
    the float64 sum of twelve 24-bit fractions is exact, then rounded once."""
    count = math.prod(shape)
    draws = _draw(12 * count).view(count, 12)
    return (draws.sum(dim=1) - 6.0).float().reshape(shape)
