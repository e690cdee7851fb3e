"""Probes without waste (autograder/sandbox/fastbuild.py): a module whose
random weights the probe overwrites is built without drawing them, and whenever
that could be seen (a layer the probe does not load, a constructor that
draws random numbers itself or raises) the result is exactly the normal
construction's."""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from autograder.sandbox import fastbuild
from autograder.sandbox.protocol import OK, Probe
from autograder.sandbox.probe_runner import drawn_state
from autograder.sandbox.worker import execute_probes
from kit_tests.test_worker import FILENAME, REFERENCE

GPT2 = {"d_in": 768, "d_out": 768, "context_length": 1024, "dropout": 0.1,
        "num_heads": 12, "qkv_bias": True}
SHAPES = {"W_query.weight": [768, 768], "W_query.bias": [768],
          "W_key.weight": [768, 768], "W_key.bias": [768],
          "W_value.weight": [768, 768], "W_value.bias": [768],
          "out_proj.weight": [768, 768], "out_proj.bias": [768]}


class Counted:
    """Counts nn.Linear's real random initialisations."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = fastbuild._reset_parameters

        def counted(layer):
            self.calls += 1
            real(layer)
        monkeypatch.setattr(fastbuild, "_reset_parameters", counted)
        monkeypatch.setattr(nn.Linear, "reset_parameters", counted)


def _normal(make, seed=3):
    torch.default_generator.manual_seed(seed)
    return make()


def _fast(make, paths, call=True, seed=3):
    torch.default_generator.manual_seed(seed)
    return fastbuild.build(make, call=call, paths=paths)


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k])
                                          for k in sa)


class Extra(nn.Module):
    """A loaded layer and one the probe does not load."""

    def __init__(self, draws: bool = False):
        super().__init__()
        self.a = nn.Linear(300, 300)
        if draws:
            self.noise = nn.Parameter(torch.randn(5))
        self.b = nn.Linear(300, 300)


def test_gpt2_probe_draws_nothing_and_answers_as_before(monkeypatch):
    counted = Counted(monkeypatch)
    probe = Probe("g", "gpt2_small_attention", {}, drawn=SHAPES,
                  drawn_seed=0, args=[torch.randn(2, 5, 768)])
    fast = list(execute_probes(REFERENCE, FILENAME, [probe]))[0]
    assert fast.status == OK and counted.calls == 0
    monkeypatch.setattr(fastbuild, "MIN_ELEMENTS", 10 ** 12)   # normal
    probe = dataclasses.replace(probe, call=True)   # a new probe object
    slow = list(execute_probes(REFERENCE, FILENAME, [probe]))[0]
    assert counted.calls == 4
    assert torch.equal(fast.outputs[0], slow.outputs[0])


def test_inspection_never_draws(monkeypatch):
    counted = Counted(monkeypatch)
    probe = Probe("i", "MultiHeadAttention", GPT2, call=False, inspect=True)
    result = list(execute_probes(REFERENCE, FILENAME, [probe]))[0]
    assert result.status == OK and counted.calls == 0
    assert result.attributes["__parameters__"]["value"] == 4 * 768 * 769


def test_a_layer_not_loaded_gets_the_normal_draws(monkeypatch):
    counted = Counted(monkeypatch)
    fast = _fast(Extra, ["a.weight", "a.bias"])
    assert counted.calls == 2   # drawn after all, in the same order
    assert _same_state(fast, _normal(Extra))
    before = counted.calls
    _fast(Extra, ["a.weight", "a.bias", "b.weight", "b.bias"])
    assert counted.calls == before   # all loaded: none drawn


def test_all_loaded_skips_every_draw(monkeypatch):
    counted = Counted(monkeypatch)
    _fast(Extra, ["a.weight", "a.bias", "b.weight", "b.bias"])
    assert counted.calls == 0


def test_a_constructor_that_draws_is_built_normally():
    fast = _fast(lambda: Extra(draws=True), ["a.weight", "a.bias"])
    assert _same_state(fast, _normal(lambda: Extra(draws=True)))
    # Its own draws are the normal ones even when every layer is loaded.
    loaded = _fast(lambda: Extra(draws=True),
                   ["a.weight", "a.bias", "b.weight", "b.bias"])
    assert torch.equal(loaded.noise,
                       _normal(lambda: Extra(draws=True)).noise)


def test_a_constructor_raising_on_unset_weights_is_built_normally():
    class Picky(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(400, 400)
            # Kaiming-uniform values lie within 1/sqrt(400) = 0.05 with a
            # std near 0.029: unset memory (zeros or garbage) does not.
            w = self.a.weight.detach()
            if not bool((w.abs() <= 0.05).all()) or float(w.std()) < 0.01:
                raise ValueError("not initialised")

    built = _fast(Picky, ["a.weight", "a.bias"])
    assert _same_state(built, _normal(Picky))


def test_drawn_weights_are_the_same_every_call():
    first = drawn_state(SHAPES, 0)
    again = drawn_state(SHAPES, 0)
    assert all(torch.equal(first[k], again[k]) for k in SHAPES)
    other = drawn_state(SHAPES, 1)
    assert not torch.equal(first["W_key.weight"], other["W_key.weight"])
