"""Public checks for the notebook: ``run_check("1.2")``.

Minimal version written with the assignment notebook; the public-checks
owner may replace the internals but keeps the API: ``run_check(task_id)``
with task ids "1.1", "1.2", "2.1", "2.2", "2.3". It raises AssertionError
with a message for the student when the task's public check fails and
prints one line otherwise. ``transformer_lm.modeling_attention`` is
re-imported on every call, so saved edits are always picked up; the
expected values come from ``transformer_lm.test_values``.
"""
from __future__ import annotations

import importlib
import re

import torch

TASKS = ("1.1", "1.2", "2.1", "2.2", "2.3")
ATOL = 1e-5


def _module():
    """A fresh import of the student's module."""
    module = importlib.import_module("transformer_lm.modeling_attention")
    return importlib.reload(module)


def _cases(cls: str) -> list:
    """(name, manifest record, tensors) of the public cases of ``cls``."""
    from transformer_lm.test_values import load_public_cases
    return [case for case in load_public_cases()
            if case.record["class"] == cls]


def _build(module, record: dict, tensors: dict) -> torch.nn.Module:
    """The student's layer for a case, with the frozen weights loaded."""
    layer = getattr(module, record["class"])(**record["init"])
    for key, value in tensors.items():
        if key.endswith((".weight", ".bias")) and "mistake." not in key:
            *path, leaf = key.split(".")
            owner = layer
            for part in path:
                owner = getattr(owner, part)
            current = getattr(owner, leaf, None)
            assert current is not None and current.shape == value.shape, (
                f"{record['class']}.{key} should be a parameter of shape "
                f"{list(value.shape)}; found "
                f"{None if current is None else list(current.shape)}")
            with torch.no_grad():
                current.copy_(value)
    return layer.eval()


def _compare(name: str, what: str, got, want, tensors: dict) -> None:
    """Assert ``got`` matches ``want``; name a known mistake if it fits."""
    assert isinstance(got, torch.Tensor), (
        f"{name}: {what} should be a tensor, got {type(got).__name__}")
    assert got.shape == want.shape, (
        f"{name}: {what} has shape {list(got.shape)}, expected "
        f"{list(want.shape)}")
    if torch.allclose(got, want, atol=ATOL, equal_nan=True):
        return
    for key, value in tensors.items():
        if key.startswith("mistake.") and key.endswith("." + what) and \
                torch.allclose(got, value, atol=ATOL, equal_nan=True):
            mistake = key.split(".")[1].replace("_", " ")
            raise AssertionError(f"{name}: your {what} matches a known "
                                 f"mistake ({mistake})")
    diff = (got - want).abs().nan_to_num(float("inf")).max().item()
    raise AssertionError(f"{name}: {what} differs from the expected values "
                         f"(max abs difference {diff:.3g})")


def _check_projections(module) -> int:
    cases = _cases("SelfAttention")
    for _, record, tensors in cases:
        _build(module, record, tensors)
    return len(cases)


def _check_self_attention(module) -> int:
    cases = _cases("SelfAttention")
    for name, record, tensors in cases:
        with torch.no_grad():
            out = _build(module, record, tensors)(tensors["x"])
        _compare(name, "output", out, tensors["output"], tensors)
    return len(cases)


def _check_multi_head(module, causal: bool | None) -> int:
    """Eval-mode cases (of the given causal flag, or all)."""
    cases = [c for c in _cases("MultiHeadSelfAttention")
             if causal is None or c[1]["init"]["causal"] == causal]
    for name, record, tensors in cases:
        with torch.no_grad():
            result = _build(module, record, tensors)(
                tensors["x"], return_attention=True)
        assert isinstance(result, tuple) and len(result) == 2, (
            f"{name}: forward(x, return_attention=True) should return "
            f"(att, probs)")
        _compare(name, "attention", result[1], tensors["attention"],
                 tensors)
        _compare(name, "output", result[0], tensors["output"], tensors)
    return len(cases)


def _check_dropout(module) -> int:
    """Train-mode cases: the output must agree with the returned probs."""
    cases = [c for c in _cases("MultiHeadSelfAttention")
             if c[1]["mode"] == "train"]
    for name, record, tensors in cases:
        layer = _build(module, record, tensors).train()
        torch.manual_seed(0)
        with torch.no_grad():
            att, probs = layer(tensors["x"], return_attention=True)
        bs, seq = tensors["x"].shape[:2]
        heads = record["init"]["num_heads"]
        assert probs.shape == (bs * heads, seq, seq), (
            f"{name}: probs should be [bs * num_heads, seq, seq]")
        assert (probs == 0).any(), (
            f"{name}: in train mode with dropout 0.5 some attention "
            f"probabilities should be zeroed: apply self.dropout to probs")
        expected = torch.einsum("bhst,bhtd->bsd",
                                probs.view(bs, heads, seq, seq),
                                tensors["value_mix"]) + tensors["mix.bias"]
        _compare(name, "output", att, expected, {})
    return len(cases)


def _run(task_id: str) -> int:
    module = _module()
    if task_id == "1.1":
        return _check_projections(module)
    if task_id == "1.2":
        return _check_self_attention(module)
    if task_id == "2.1":
        return _check_multi_head(module, causal=False)
    if task_id == "2.2":
        return _check_multi_head(module, causal=True)
    return _check_multi_head(module, None) + _check_dropout(module)


def _not_implemented(task_id: str, missing: NotImplementedError) -> str:
    """The message for a skeleton that still raises NotImplementedError."""
    text = str(missing)
    found = re.search(r"Task (\d\.\d)", text)
    needed = found.group(1) if found else task_id
    if "not implemented yet" not in text:
        text = f"Task {needed} not implemented yet: {text or 'skeleton'}"
    if needed != task_id:
        text += f" (needed to check Task {task_id})"
    return text


def run_check(task_id: str) -> None:
    """Check one task on the public cases; AssertionError if it fails."""
    if task_id not in TASKS:
        raise ValueError(f"unknown task {task_id!r}; one of {TASKS}")
    try:
        count = _run(task_id)
    except NotImplementedError as missing:
        raise AssertionError(_not_implemented(task_id, missing)) from None
    except AssertionError as failure:
        raise AssertionError(f"Task {task_id}: {failure}") from None
    print(f"Task {task_id}: passed the public checks ({count} cases).")
