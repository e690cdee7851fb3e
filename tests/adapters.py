"""The single link between your implementation and the tests.

The tests never import your code directly: they build your modules through
the functions here. By default they test
``transformer_lm/modeling_attention.py`` of this project; set the
environment variable ``ATTENTION_IMPL`` to the path of another file to test
that one instead, e.g.::

    ATTENTION_IMPL=my_attempt.py pytest tests
"""
from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Iterator, Mapping

import pytest
import torch
import torch.nn as nn

IMPL_ENV = "ATTENTION_IMPL"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_IMPL = ROOT / "transformer_lm" / "modeling_attention.py"


def implementation_path() -> Path:
    """The file under test: ``$ATTENTION_IMPL`` (relative to the current
    directory) or transformer_lm/modeling_attention.py."""
    return Path(os.environ.get(IMPL_ENV) or DEFAULT_IMPL).resolve()


@lru_cache(maxsize=None)
def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("attention_under_test",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_implementation() -> ModuleType:
    """Import the implementation module from its file; fail the test with
    the reason if that is impossible."""
    path = implementation_path()
    if not path.is_file():
        pytest.fail(f"no implementation at {path} (set {IMPL_ENV})",
                    pytrace=False)
    try:
        return _import(path)
    except Exception as exc:  # any import error is the student's to see
        raise pytest.fail.Exception(
            f"cannot import {path}: {type(exc).__name__}: {exc}",
            pytrace=False) from None


@contextmanager
def running(task: str) -> Iterator[None]:
    """Run student code for a test of ``task``; an unfinished task (the
    skeleton's NotImplementedError) fails the test with its message."""
    try:
        yield
    except NotImplementedError as exc:
        message = str(exc) or f"Task {task} not implemented yet"
        if not message.startswith(f"Task {task} "):
            message += f"\n(this test checks Task {task}, which needs it)"
        # "from None": the skeleton's traceback would only add noise.
        raise pytest.fail.Exception(message, pytrace=False) from None


def new_self_attention(input_size: int, hidden: int) -> nn.Module:
    """``SelfAttention(input_size, hidden)`` with its own initial weights."""
    impl = load_implementation()
    with running("1.1"):
        return impl.SelfAttention(input_size, hidden).eval()


def new_multi_head(input_size: int, hidden: int, num_heads: int,
                   causal: bool = False, dropout: float = 0.0) -> nn.Module:
    """``MultiHeadSelfAttention(...)`` in eval mode with its own initial
    weights. Exceptions other than NotImplementedError propagate."""
    impl = load_implementation()
    with running("2.1"):
        return impl.MultiHeadSelfAttention(
            input_size, hidden, num_heads, causal=causal,
            dropout=dropout).eval()


def load_weights(module: nn.Module, values: Mapping[str, torch.Tensor],
                 task: str) -> None:
    """Copy the frozen weights (keys such as ``"q.weight"``) into the
    parameters of ``module`` at those attribute paths."""
    for path, value in values.items():
        if not path.endswith((".weight", ".bias")) or \
                path.startswith("mistake."):
            continue
        try:
            parameter = module.get_parameter(path)
        except AttributeError:
            pytest.fail(f"Task {task}: {type(module).__name__} has no "
                        f"parameter {path} (keep the attribute names the "
                        f"docstring gives)", pytrace=False)
        if parameter.shape != value.shape:
            pytest.fail(f"Task {task}: shape mismatch for {path}: expected "
                        f"shape {list(value.shape)}, got shape "
                        f"{list(parameter.shape)}", pytrace=False)
        with torch.no_grad():
            parameter.copy_(value)


def make_self_attention(values: Mapping[str, torch.Tensor]) -> nn.Module:
    """Your SelfAttention with the frozen weights of ``values``; the sizes
    follow from ``q.weight`` ([hidden, input_size])."""
    hidden, input_size = values["q.weight"].shape
    module = new_self_attention(input_size, hidden)
    load_weights(module, values, task="1.1")
    return module


def make_multi_head(values: Mapping[str, torch.Tensor], num_heads: int,
                    causal: bool, dropout: float = 0.0) -> nn.Module:
    """Your MultiHeadSelfAttention (eval mode) with the frozen weights of
    ``values``."""
    hidden, input_size = values["q.weight"].shape
    module = new_multi_head(input_size, hidden, num_heads, causal, dropout)
    load_weights(module, values, task="2.1")
    return module


def run_self_attention(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` of your SelfAttention, without gradients."""
    with running("1.2"), torch.no_grad():
        return module(x)


def run_multi_head(module: nn.Module, x: torch.Tensor,
                   return_attention: bool = False, task: str = "2.3"):
    """``module(x, return_attention)`` of your MultiHeadSelfAttention,
    without gradients: ``att``, or ``(att, probs)``."""
    with running(task), torch.no_grad():
        result = module(x, return_attention=return_attention)
    if return_attention and not (isinstance(result, tuple)
                                 and len(result) == 2):
        pytest.fail(f"Task 2.3: forward(x, return_attention=True) must "
                    f"return the tuple (att, probs), got "
                    f"{type(result).__name__}", pytrace=False)
    return result


# --------------------------------------------------------------------------
# Part 3: the book's modules, built from keyword arguments such as a case's
# ``record["init"]``: d_in, d_out, context_length, dropout, (num_heads,)
# qkv_bias.

PART3_TASKS = {"CausalAttention": "3.1", "MultiHeadAttentionWrapper": "3.2",
               "MultiHeadAttention": "3.3"}


def new_part3(cls: str, **init) -> nn.Module:
    """``cls(**init)`` of your implementation in eval mode, with its own
    initial weights. Exceptions other than NotImplementedError (a
    ValueError, say) propagate."""
    impl = load_implementation()
    with running(PART3_TASKS[cls]):
        return getattr(impl, cls)(**init).eval()


def make_part3(cls: str, values: Mapping[str, torch.Tensor],
               init: Mapping) -> nn.Module:
    """Your ``cls(**init)`` (eval mode) with the frozen weights of
    ``values`` (keys such as ``"heads.0.W_key.weight"``)."""
    module = new_part3(cls, **init)
    load_weights(module, values, task=PART3_TASKS[cls])
    return module


def make_causal_attention(values: Mapping[str, torch.Tensor],
                          init: Mapping) -> nn.Module:
    """Your CausalAttention(**init) with the frozen weights."""
    return make_part3("CausalAttention", values, init)


def make_wrapper(values: Mapping[str, torch.Tensor],
                 init: Mapping) -> nn.Module:
    """Your MultiHeadAttentionWrapper(**init) with the frozen weights."""
    return make_part3("MultiHeadAttentionWrapper", values, init)


def make_multi_head_attention(values: Mapping[str, torch.Tensor],
                              init: Mapping) -> nn.Module:
    """Your MultiHeadAttention(**init) with the frozen weights."""
    return make_part3("MultiHeadAttention", values, init)


def run_part3(module: nn.Module, x: torch.Tensor, task: str):
    """``module(x)`` without gradients; an unfinished task fails the test."""
    with running(task), torch.no_grad():
        return module(x)


def gpt2_small_attention() -> nn.Module:
    """Your ``gpt2_small_attention()``."""
    impl = load_implementation()
    with running("3.4"):
        return impl.gpt2_small_attention()
