"""kit/exact.py: float64 products, sums and softmax built from elementwise
operations agree with torch's own, and nothing else reduces inside it."""
from __future__ import annotations

import math

import pytest
import torch

from kit.exact import _exp, exact


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
