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
- :func:`draw_parameters` draws every parameter of a module whose layers
  are ``nn.Linear`` (as :func:`linear_init`) or ``nn.LayerNorm``, whose
  weight and bias are drawn around torch's ones and zeros (U(0.5, 1.5) and
  U(-0.5, 0.5)): torch's own init would let a forgotten weight or bias
  pass unseen; a parameter set on a module of the homework's own
  (``self.weight``) is drawn U(-1/sqrt(n), 1/sqrt(n)), n its last dimension;
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


def _linear(layer: nn.Linear, kind: str, shape: tuple[int, ...]
            ) -> torch.Tensor:
    """As ``nn.Linear.reset_parameters``: weight kaiming_uniform_ (a =
    sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    gain = nn.init.calculate_gain("leaky_relu", math.sqrt(5))
    fan_in = layer.in_features
    bound = (math.sqrt(3.0) * (gain / math.sqrt(fan_in))
             if kind == "weight" else 1 / math.sqrt(fan_in))
    return uniform(shape, bound)


# LayerNorm's weight and bias are drawn around torch's init (ones, zeros)
# so that a LayerNorm without its weight or bias gives other values.
LAYER_NORM_SPREAD = 0.5


def _layer_norm(layer: nn.LayerNorm, kind: str, shape: tuple[int, ...]
                ) -> torch.Tensor:
    """Weight U(1 - spread, 1 + spread), bias U(-spread, spread): the
    float64 sum of a draw and 1 is exact, rounded once."""
    centre = 1.0 if kind == "weight" else 0.0
    low = torch.tensor(-LAYER_NORM_SPREAD, dtype=torch.float32).double()
    draws = _draw(math.prod(shape)) * (2 * LAYER_NORM_SPREAD) + low
    return (draws + centre).float().reshape(shape)


# The layers whose parameters are drawn, each with its rule.
DRAWN_LAYERS = ((nn.Linear, _linear), (nn.LayerNorm, _layer_norm))


def _own(module: nn.Module, kind: str, shape: tuple[int, ...]
         ) -> torch.Tensor:
    """A parameter set on a module of the homework's own (``self.weight``,
    no torch layer around it): U(-1/sqrt(n), 1/sqrt(n)), n its last
    dimension, so that neither a forgotten weight (not ones) nor a bias
    (not zeros) passes."""
    return uniform(shape, 1 / math.sqrt(shape[-1] if shape else 1))


def draw_parameters(module: nn.Module,
                    layers: tuple = DRAWN_LAYERS
                    ) -> dict[str, torch.Tensor]:
    """Every parameter of ``module`` from the current seed, in registration
    order, by its layer's rule in ``layers`` (one set on a module of the
    homework's own, ``self.weight``: :func:`_own`); a parameter of any
    other torch layer raises a TypeError naming it and the layers that
    are drawn."""
    found: dict[str, torch.Tensor] = {}
    owners = dict(module.named_modules())
    for name, param in module.named_parameters():
        owner, _, kind = name.rpartition(".")
        rule = next((draw for cls, draw in layers
                     if isinstance(owners[owner], cls)),
                    None if type(owners[owner]).__module__.startswith(
                        "torch.") else _own)
        if rule is None:
            drawn = ", ".join(f"nn.{cls.__name__}" for cls, _ in layers)
            raise TypeError(f"{name}: a parameter of "
                            f"{type(owners[owner]).__name__}; only {drawn} "
                            f"parameters are drawn (kit/generate/draws.py)")
        found[name] = rule(owners[owner], kind, tuple(param.shape))
    return found


def linear_init(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter of ``module`` (only ``nn.Linear`` layers may hold
    parameters) as ``nn.Linear.reset_parameters`` draws it from the current
    seed, in registration order."""
    return draw_parameters(module, layers=((nn.Linear, _linear),))


def normal(*shape: int) -> torch.Tensor:
    """float32 draws of mean 0 and variance 1 (Irwin-Hall of 12 uniforms):
    the float64 sum of twelve 24-bit fractions is exact, then rounded once."""
    count = math.prod(shape)
    draws = _draw(12 * count).view(count, 12)
    return (draws.sum(dim=1) - 6.0).float().reshape(shape)
