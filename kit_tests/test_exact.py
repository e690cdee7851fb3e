"""kit/generate/exact.py: float64 products, sums and softmax built from
elementwise operations agree with torch's own, and nothing else reduces
inside it."""
from __future__ import annotations

import math

import pytest
import torch

from kit.generate.exact import _exp, exact


def test_exp_is_accurate_and_handles_the_softmax_edges():
    generator = torch.Generator().manual_seed(0)
    r = -torch.rand(10_000, dtype=torch.float64, generator=generator) * 60
    # Against the C library's exp, element by element: the reference must
    # not depend on which of torch's CPU kernels runs (it once differed).
    want = torch.tensor([math.exp(v) for v in r.tolist()],
                        dtype=torch.float64)
    relative = ((_exp(r) - want) / want).abs().max()
    assert relative < 5e-16
    edges = torch.tensor([0.0, -float("inf"), float("nan"), -1e9],
                         dtype=torch.float64)
    got = _exp(edges)
    assert got[0] == 1 and got[1] == 0 and torch.isnan(got[2]) and \
        got[3] == 0


def test_products_linear_and_softmax_agree_with_torch():
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(2, 3, 5, 7, dtype=torch.float64, generator=generator)
    b = torch.randn(3, 7, 4, dtype=torch.float64, generator=generator)
    linear = torch.nn.Linear(7, 6).double()
    scores = a.masked_fill(torch.ones(5, 7).triu(1).bool(), float("-inf"))
    with torch.no_grad():
        want = (a @ b, linear(a), torch.softmax(scores, dim=-1),
                scores.softmax(dim=-2))
        with exact():
            got = (a @ b, linear(a), torch.softmax(scores, dim=-1),
                   scores.softmax(dim=-2))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-14, rtol=0, equal_nan=True)


def test_a_fully_masked_row_gives_nan_as_torch_does():
    row = torch.full((1, 3), float("-inf"), dtype=torch.float64)
    with exact():
        got = torch.softmax(row, dim=-1)
    assert torch.isnan(got).all() and torch.isnan(torch.softmax(row, -1)).all()


@pytest.mark.parametrize("call", [lambda t: t.sum(), lambda t: t.exp(),
                                  lambda t: torch.einsum("ij->i", t)])
def test_other_reductions_are_refused(call):
    t = torch.ones(2, 2, dtype=torch.float64)
    call(t)   # fine outside
    with exact(), pytest.raises(RuntimeError, match="not exact"):
        call(t)


def test_sin_cos_and_number_powers_are_accurate():
    # Against the C library element by element, over the angles rotary
    # embeddings make (position times frequency) and beyond.
    t = torch.linspace(-300, 300, 60_001, dtype=torch.float64)
    t = torch.cat([t, torch.tensor([0.0, -0.0, math.pi / 4, 1e-300])])
    with exact():
        sin, cos = t.sin(), torch.cos(t)
        powers = 10000.0 ** (-torch.arange(0, 64, 2).double() / 64)
    for got, f in ((sin, math.sin), (cos, math.cos)):
        want = torch.tensor([f(v) for v in t.tolist()], dtype=torch.float64)
        assert (got - want).abs().max() <= 2.3e-16
    assert math.copysign(1, sin[-3]) == -1      # sin(-0) is -0
    want = torch.tensor([10000.0 ** (-i / 64) for i in range(0, 64, 2)],
                        dtype=torch.float64)
    assert ((powers - want) / want).abs().max() < 2e-15
    edges = torch.tensor([float("nan"), float("inf")], dtype=torch.float64)
    with exact():
        found = (edges.sin(), edges.cos())
    assert all(torch.isnan(f).all() for f in found)


def test_sin_cos_do_not_call_the_c_library():
    # The same bits whichever kernel torch would pick: the result is made
    # of +, -, *, / and round only, so it cannot depend on the CPU; here,
    # it must at least not be torch's own (SLEEF or libm) result verbatim
    # on every element, which would mean the call went through.
    t = torch.linspace(-40, 40, 10_001, dtype=torch.float64)
    with exact():
        sin = t.sin()
    assert not torch.equal(sin, torch.sin(t))
    torch.testing.assert_close(sin, torch.sin(t), atol=3e-16, rtol=0)


@pytest.mark.parametrize("call", [
    lambda t: t.tan(), lambda t: t.sin_(), lambda t: torch.atan2(t, t),
    lambda t: t ** 1.7, lambda t: torch.pow(t, t), lambda t: t.exp_(),
    lambda t: torch.special.expit(t), lambda t: torch.nn.functional.gelu(t),
    lambda t: torch.special.erf(t)])
def test_other_transcendental_functions_are_refused(call):
    t = torch.ones(2, 2, dtype=torch.float64)
    call(t.clone())   # fine outside
    with exact(), pytest.raises(RuntimeError, match="not exact"):
        call(t.clone())
