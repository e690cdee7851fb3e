"""Public checks for the notebook: ``run_check("1.2")``.

Minimal version written with the assignment notebook; the public-checks
owner may replace the internals but keeps the API: ``run_check(task_id)``
with task ids "1.1", "1.2", "2.1", "2.2", "2.3" and, for Part 3, "3.1",
"3.2", "3.3", "3.4". It raises AssertionError
with a message for the student when the task's public check fails and
prints one line otherwise. ``transformer_lm.modeling_attention`` is
re-imported on every call, so saved edits are always picked up; the
expected values come from ``transformer_lm.test_values``.
"""
from __future__ import annotations

import importlib
import re

import torch

TASKS = ("1.1", "1.2", "2.1", "2.2", "2.3", "3.1", "3.2", "3.3",
         "3.4")
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


def _check_part3_values(module, cls: str) -> int:
    """Eval-mode cases of a Part 3 class: the frozen outputs, and (for the
    causal modules) the first tokens' outputs unchanged by the last one."""
    cases = [c for c in _cases(cls) if c[1]["mode"] == "eval"]
    for name, record, tensors in cases:
        layer = _build(module, record, tensors)
        x = tensors["x"]
        with torch.no_grad():
            out = layer(x)
            _compare(name, "output", out, tensors["output"], tensors)
            if x.shape[1] > 1:
                changed = x.clone()
                changed[:, -1] = -changed[:, -1] + 1
                later = layer(changed)
                assert torch.allclose(later[:, :-1], out[:, :-1],
                                      atol=ATOL), (
                    f"{name}: changing the last token changed earlier "
                    f"outputs: mask the future before the softmax")
    return len(cases)


def _check_weight_dropout(module, cls: str) -> int:
    """Dropout probes: x = I and values [I; I] make each head's output
    [A | A] with A its attention weights; in train mode both halves must
    be the same dropped-out weights."""
    cases = [c for c in _cases(cls) if c[1]["mode"] == "train"]
    for name, record, tensors in cases:
        layer = _build(module, record, tensors).train()
        p = record["init"]["dropout"]
        heads = record["init"].get("num_heads", 1)
        b, n, _ = tensors["x"].shape
        torch.manual_seed(0)
        with torch.no_grad():
            out = layer(tensors["x"])
        assert out.shape == tensors["output"].shape, (
            f"{name}: train-mode output has shape {list(out.shape)}, "
            f"expected {list(tensors['output'].shape)}")
        halves = out.view(b, n, heads, 2, n)
        first, second = halves[:, :, :, 0], halves[:, :, :, 1]
        assert torch.allclose(first, second, atol=1e-6), (
            f"{name}: in train mode apply self.dropout to the attention "
            f"weights, not to the output")
        want = tensors["attention"].view(b, heads, n, n).transpose(1, 2)
        kept = first != 0
        assert torch.allclose(first[kept], want[kept] / (1 - p),
                              atol=1e-6), (
            f"{name}: kept attention weights should be scaled by "
            f"1 / (1 - p)")
        assert ((want > 0) & ~kept).any(), (
            f"{name}: no attention weight was dropped in train mode: apply "
            f"self.dropout to the attention weights")
    return len(cases)


def _check_wrapper_width(module) -> int:
    x = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0))
    for heads in (1, 3):
        wrapper = module.MultiHeadAttentionWrapper(7, 4, 8, 0.0, heads)
        with torch.no_grad():
            out = wrapper.eval()(x)
        assert tuple(out.shape) == (2, 5, 4 * heads), (
            f"{heads} heads of d_out 4: output shape {list(out.shape)}, "
            f"expected [2, 5, {4 * heads}] (the heads side by side)")
    return 2


def _check_context_limit(module) -> int:
    layer = module.MultiHeadAttention(3, 4, 5, 0.0, 2).eval()
    with torch.no_grad():
        layer(torch.zeros(1, 5, 3))
        try:
            layer(torch.zeros(1, 6, 3))
        except ValueError:
            return 1
    raise AssertionError("6 tokens with context_length 5 should raise "
                         "ValueError")


def _check_gpt2(module) -> int:
    (name, _, tensors), = _cases("gpt2_small_attention")
    layer = module.gpt2_small_attention()
    assert type(layer).__name__ == "MultiHeadAttention", (
        f"gpt2_small_attention() should return a MultiHeadAttention, got "
        f"{type(layer).__name__}")
    want = {key[:-len(".shape")]: value.tolist()
            for key, value in tensors.items() if key.endswith(".shape")}
    got = {key: list(p.shape) for key, p in layer.named_parameters()}
    assert got == want, f"parameters {got}, expected {want}"
    count = sum(p.numel() for p in layer.parameters())
    assert count == int(tensors["num_parameters"]), (
        f"{count:,} parameters, expected {int(tensors['num_parameters']):,}")
    assert (layer.num_heads, layer.head_dim, layer.dropout.p,
            tuple(layer.mask.shape)) == (12, 64, 0.1, (1024, 1024)), (
        "expected 12 heads of 64, dropout 0.1 and a context of 1024")
    with torch.no_grad():
        out = layer.eval()(tensors["x"])
    assert out.shape == tensors["x"].shape, (
        f"output shape {list(out.shape)}, expected {list(tensors['x'].shape)}")
    return 1


def _run(task_id: str) -> int:
    module = _module()
    if task_id == "3.1":
        return (_check_part3_values(module, "CausalAttention")
                + _check_weight_dropout(module, "CausalAttention"))
    if task_id == "3.2":
        return (_check_part3_values(module, "MultiHeadAttentionWrapper")
                + _check_wrapper_width(module))
    if task_id == "3.3":
        return (_check_part3_values(module, "MultiHeadAttention")
                + _check_weight_dropout(module, "MultiHeadAttention")
                + _check_context_limit(module))
    if task_id == "3.4":
        return _check_gpt2(module)
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
    plural = "" if count == 1 else "s"
    print(f"Task {task_id}: passed the public checks ({count} "
          f"check{plural}).")
