"""The one place where a test compares what your code gave to what it should.

A failure names the task and says what is wrong and where: a shape mismatch,
or the largest absolute difference, its index, and the expected and actual
values there.
"""
from __future__ import annotations

from typing import Any, Sequence

import pytest
import torch

ATOL = 1e-5
RTOL = 1e-5


def assert_shape(got: Any, expected_shape: Sequence[int], *, task: str,
                 what: str) -> None:
    """Fail unless ``got`` is a tensor of shape ``expected_shape``."""
    if not isinstance(got, torch.Tensor):
        pytest.fail(f"Task {task}: {what}: expected a torch.Tensor, got "
                    f"{type(got).__name__}", pytrace=False)
    if tuple(got.shape) != tuple(expected_shape):
        pytest.fail(f"Task {task}: {what}: shape mismatch: expected shape "
                    f"{list(expected_shape)}, got shape {list(got.shape)}",
                    pytrace=False)


def assert_close(got: Any, expected: torch.Tensor, *, task: str, what: str,
                 atol: float = ATOL, rtol: float = RTOL) -> None:
    """Fail unless ``got`` has the shape of ``expected`` and every element
    is within ``atol + rtol * |expected|`` of it."""
    assert_shape(got, expected.shape, task=task, what=what)
    got64 = got.detach().to("cpu", torch.float64)
    expected64 = expected.detach().to("cpu", torch.float64)
    # A NaN or inf in your output counts as infinitely far off.
    diff = (got64 - expected64).abs().nan_to_num(nan=float("inf"))
    wrong = diff > atol + rtol * expected64.abs()
    if not wrong.any():
        return
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(),
                                                      diff.shape))
    pytest.fail(
        f"Task {task}: {what}: wrong values\n"
        f"  max abs difference: {diff[index].item():.6g} at index {index}\n"
        f"  expected {expected64[index].item():.6g}, "
        f"got {got64[index].item():.6g} there\n"
        f"  {int(wrong.sum())} of {wrong.numel()} elements differ by more "
        f"than atol={atol:g} + rtol={rtol:g} * |expected|",
        pytrace=False)
