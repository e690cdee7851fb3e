"""kit/generate/exact.py: float64 products, sums, softmax, LayerNorm, log,
log_softmax, tanh, erf and GELU built from elementwise operations agree
with torch's own (or the C library's) within the module's stated
tolerances, and nothing else reduces inside it."""
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


@pytest.mark.parametrize("call", [lambda t: t.prod(), lambda t: t.exp(),
                                  lambda t: torch.einsum("ij->i", t),
                                  lambda t: torch.cumsum(t, 0),
                                  lambda t: torch.var_mean(t, 0)])
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
    lambda t: torch.special.expit(t), lambda t: t.erf_(),
    lambda t: torch.sigmoid(t), lambda t: torch.nn.functional.silu(t)])
def test_other_transcendental_functions_are_refused(call):
    t = torch.ones(2, 2, dtype=torch.float64)
    call(t.clone())   # fine outside
    with exact(), pytest.raises(RuntimeError, match="not exact"):
        call(t.clone())


F = torch.nn.functional


def _exact_and_torch(call, *tensors):
    with torch.no_grad():
        want = call(*tensors)
        with exact():
            got = call(*tensors)
    return got, want


@pytest.mark.parametrize("call", [
    lambda t: t.mean(-1, keepdim=True), lambda t: t.mean(),
    lambda t: torch.mean(t, dim=(0, 2)), lambda t: t.sum(-1),
    lambda t: torch.sum(t, (1, 2), keepdim=True), lambda t: t.sum(),
    lambda t: t.var(-1, keepdim=True, unbiased=False), lambda t: t.var(-1),
    lambda t: t.var(False), lambda t: torch.var(t, 1, correction=0),
    lambda t: t.std(dim=-1), lambda t: F.layer_norm(t, (5, 16)),
    lambda t: torch.layer_norm(t, [16], None, None, 1e-5, False),
    lambda t: (t - t.mean(-1, keepdim=True))
    / torch.sqrt(t.var(-1, keepdim=True, unbiased=False) + 1e-5)])
def test_means_variances_and_layer_norm_agree_with_torch(call):
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, 16, dtype=torch.float64, generator=generator) * 3
    got, want = _exact_and_torch(call, x + 1)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-13, rtol=0)


def test_integer_sums_stay_integers():
    mask = torch.ones(3, 4, dtype=torch.bool)
    with exact():
        counts = (mask.sum(), mask.sum(-1))
    assert counts[0] == 12 and counts[1].tolist() == [4, 4, 4]


def _layer_norm_module(size: int) -> torch.nn.LayerNorm:
    generator = torch.Generator().manual_seed(3)
    module = torch.nn.LayerNorm(size).double()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(size, dtype=torch.float64,
                                    generator=generator))
    return module


def test_layer_norm_is_computed_not_left_to_torchs_kernel():
    # nn.LayerNorm once ran torch's own kernel inside exact(): its bits
    # were torch's, which differ from the hand-written form's.
    module = _layer_norm_module(64)
    x = torch.randn(50, 64, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(4)) * 5 + 2
    got, want = _exact_and_torch(module, x)
    torch.testing.assert_close(got, want, atol=1e-13, rtol=0)
    assert not torch.equal(got, want)
    with torch.no_grad(), exact():
        mean = x.mean(-1, keepdim=True)
        by_hand = ((x - mean) / (x.var(-1, keepdim=True, unbiased=False)
                                 + module.eps).sqrt()
                   * module.weight + module.bias)
    assert torch.equal(got, by_hand)


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    keep = want.abs() > 1e-80      # exp(UNDERFLOW) and below give 0
    return ((got[keep] - want[keep]) / want[keep]).abs().max().item()


def _angles() -> torch.Tensor:
    generator = torch.Generator().manual_seed(5)
    return torch.cat([
        torch.randn(20_000, dtype=torch.float64, generator=generator) * 4,
        torch.linspace(-9, 9, 8_001, dtype=torch.float64)])


def test_tanh_erf_and_erfc_are_accurate_against_the_c_library():
    x = _angles()
    with exact():
        found = {math.tanh: torch.tanh(x), math.erf: x.erf(),
                 math.erfc: torch.special.erfc(x)}
    bounds = {math.tanh: 1e-15, math.erf: 1e-15, math.erfc: 3e-15}
    for f, got in found.items():
        want = torch.tensor([f(v) for v in x.tolist()], dtype=torch.float64)
        assert _relative(got, want) < bounds[f], f.__name__
    edges = torch.tensor([0.0, float("inf"), -float("inf"), float("nan")],
                         dtype=torch.float64)
    with exact():
        tanh, erf = edges.tanh(), torch.erf(edges)
    assert tanh[:3].tolist() == [0, 1, -1] and torch.isnan(tanh[3])
    assert erf[:3].tolist() == [0, 1, -1] and torch.isnan(erf[3])


def _gelu_tanh(v: float) -> float:
    u = math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)
    if u >= 0:
        return 0.5 * v * (1 + math.tanh(u))
    return v * math.exp(2 * u) / (1 + math.exp(2 * u))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_accurate_in_both_forms(approximate):
    x = _angles()
    exact_gelu = {"none": lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2)),
                  "tanh": _gelu_tanh}[approximate]
    with exact():
        got = torch.nn.GELU(approximate)(x)
        functional = F.gelu(x, approximate=approximate)
    assert torch.equal(got, functional)
    want = torch.tensor([exact_gelu(v) for v in x.tolist()],
                        dtype=torch.float64)
    near = x.abs() <= 3
    assert _relative(got[near], want[near]) < 4e-15
    assert (got - want).abs().max() < 2e-15
    torch.testing.assert_close(got, F.gelu(x, approximate=approximate),
                               atol=2e-15, rtol=0)
    assert not torch.equal(got, F.gelu(x, approximate=approximate))


@pytest.mark.parametrize("call, name", [
    (lambda t: F.rms_norm(t, (4,)), "rms_norm"),
    (lambda t: F.group_norm(t, 1), "group_norm"),
    (lambda t: F.normalize(t), "normalize"),
    (lambda t: F.softmin(t, -1), "softmin"),
    (lambda t: F.mse_loss(t, t), "mse_loss"),
    (lambda t: torch.linalg.vector_norm(t), "linalg_vector_norm"),
    (lambda t: F.batch_norm(t, None, None, training=True), "batch_norm")])
def test_normalisations_it_cannot_make_exact_are_refused_by_name(call, name):
    t = torch.ones(2, 4, dtype=torch.float64)
    call(t)   # fine outside
    with exact(), pytest.raises(RuntimeError,
                                match=rf"^{name} is not exact .*\(.+\)"):
        call(t)


def test_log_is_accurate_against_the_c_library_and_its_edges():
    generator = torch.Generator().manual_seed(7)
    mantissas = 0.1 + 0.9 * torch.rand(2000, generator=generator,
                                       dtype=torch.float64)
    x = torch.cat([mantissas * 10.0 ** torch.randint(
                       -300, 300, (2000,), generator=generator).double(),
                   torch.tensor([1.0, 2.0, 0.5, math.sqrt(2.0), 1 - 1e-16,
                                 1 + 2e-16, 1e-300, 1.7e308],
                                dtype=torch.float64)])
    with exact():
        got = torch.log(x)
        also = x.log()
    want = torch.tensor([math.log(v) for v in x.tolist()],
                        dtype=torch.float64)
    ulp = torch.finfo(torch.float64).eps
    assert ((got - want).abs() <= 2 * ulp * want.abs().clamp(min=1e-300)
            + 1e-300).all()
    assert torch.equal(got, also) and got[len(x) - 8].item() == 0.0
    edges = torch.tensor([0.0, -1.0, float("inf"), float("nan")],
                         dtype=torch.float64)
    with exact():
        found = edges.log()
    assert found[0].item() == -math.inf and torch.isnan(found[1])
    assert found[2].item() == math.inf and torch.isnan(found[3])


@pytest.mark.parametrize("call", [
    lambda t: t.log_softmax(-1), lambda t: F.log_softmax(t, dim=1),
    lambda t: torch.log_softmax(t, 0),
    lambda t: -(t.softmax(-1).log() * t.gt(0)).sum(-1).mean()])
def test_log_softmax_and_a_cross_entropy_agree_with_torch(call):
    t = torch.randn(3, 4, 6, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(8)) * 5
    got, want = _exact_and_torch(call, t)
    torch.testing.assert_close(got, want, atol=1e-14, rtol=1e-14)
