"""kit/generate/draws.py: every parameter of the layers a homework uses is
drawn from integer draws only, in registration order, and any other layer's
parameter is refused by name."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from kit.generate import draws


class _Block(nn.Module):
    """A feed-forward block's layers: LayerNorm, two Linear, GELU."""

    def __init__(self, size: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.up = nn.Linear(size, 4 * size)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * size, size)


def test_every_layer_norm_and_linear_parameter_is_drawn_float32():
    module = _Block()
    torch.manual_seed(0)
    drawn = draws.draw_parameters(module)
    assert list(drawn) == [name for name, _ in module.named_parameters()]
    for name, param in module.named_parameters():
        assert drawn[name].shape == param.shape, name
        assert drawn[name].dtype == torch.float32, name


def test_layer_norm_draws_are_not_torchs_ones_and_zeros():
    # torch's init (weight 1, bias 0) would let a forgotten weight or bias
    # give the right values: the draws spread around them instead.
    torch.manual_seed(1)
    drawn = draws.draw_parameters(nn.LayerNorm(512))
    spread = draws.LAYER_NORM_SPREAD
    weight, bias = drawn["weight"].double(), drawn["bias"].double()
    assert (weight - 1).abs().max() <= spread and (weight - 1).std() > 0.1
    assert bias.abs().max() <= spread and bias.std() > 0.1
    assert not torch.equal(weight, torch.ones(512, dtype=torch.float64))


def test_draws_follow_the_seed_and_leave_linear_layers_as_linear_init():
    module = _Block()
    torch.manual_seed(2)
    first = draws.draw_parameters(module)
    torch.manual_seed(2)
    again = draws.draw_parameters(module)
    assert all(torch.equal(first[k], again[k]) for k in first)
    linear = nn.Sequential(nn.Linear(8, 4), nn.Linear(4, 2))
    torch.manual_seed(3)
    general = draws.draw_parameters(linear)
    torch.manual_seed(3)
    assert all(torch.equal(general[k], v)
               for k, v in draws.linear_init(linear).items())


def test_draws_do_not_depend_on_torchs_float_kernels():
    # Only torch.randint's integers are drawn: the same seed gives the
    # same bits whichever float random kernel torch would have used.
    module = nn.LayerNorm(16)
    torch.manual_seed(4)
    drawn = draws.draw_parameters(module)
    torch.manual_seed(4)
    integers = torch.randint(0, 2 ** 24, (16,), dtype=torch.int64)
    want = ((integers.double() * 2.0 ** -24 - 0.5) + 1).float()
    assert torch.equal(drawn["weight"], want)


@pytest.mark.parametrize("layer, name", [
    (nn.Embedding(4, 2), "Embedding"), (nn.Conv1d(2, 2, 1), "Conv1d")])
def test_a_parameter_of_another_layer_is_refused_by_name(layer, name):
    with pytest.raises(TypeError, match=rf"^weight: a parameter of {name}; "
                       r"only nn.Linear, nn.LayerNorm parameters are drawn"):
        draws.draw_parameters(layer)
    with pytest.raises(TypeError, match="only nn.Linear parameters"):
        draws.linear_init(nn.LayerNorm(2))


def test_a_parameter_of_the_homeworks_own_module_is_drawn_around_zero():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(3, 16))
            self.bias = nn.Parameter(torch.zeros(3))
            self.inner = nn.Linear(16, 3)

    module = Scaled()   # nn.Linear's own init draws too: made first
    torch.manual_seed(5)
    drawn = draws.draw_parameters(module)
    assert list(drawn) == ["weight", "bias", "inner.weight", "inner.bias"]
    assert drawn["weight"].abs().max() <= 0.25 and drawn["weight"].std() > 0
    assert drawn["bias"].abs().max() <= 1 / 3 ** 0.5
    assert not torch.equal(drawn["bias"], torch.zeros(3))
    torch.manual_seed(5)
    assert torch.equal(drawn["weight"], draws.uniform((3, 16), 0.25))
