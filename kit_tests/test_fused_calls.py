"""Fused attention calls: the worker's recorder of their arguments
(``sandbox/fused_recorder.py``), their bounds on the wire, and the causes
inside the call named only when replaying the recorded call with the
named fix gives the reference (``checks/diagnosis/fused.py``), beside
controls that stay silent. The sandbox end to end: the ``sdpa_*`` bugs of
kit/corpus/diagnosis_bugs.toml (test_diagnosis.py)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from autograder.checks.diagnosis import fused
from autograder.checks.diagnosis.flow import Divergence
from autograder.sandbox import wire
from autograder.sandbox.fused_recorder import FusedRecorder
from autograder.sandbox.limits import LIMITS
from autograder.sandbox.protocol import OK, FusedCall, ProbeResult

B, H, S, D = 2, 3, 5, 4
HIDE = torch.ones(S, S, dtype=torch.bool).triu(1)


def _qkv() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return tuple(torch.randn(B, H, S, D) for _ in range(3))


def _steps() -> dict[str, torch.Tensor]:
    q, k, v = _qkv()
    context = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return {"q": q, "k": k, "v": v, "context": context}


def _explain(call: FusedCall, got: torch.Tensor):
    steps = _steps()
    divergence = Divergence(7, "context", got, steps["context"])
    return fused.explain([call], divergence, steps, D, "head_dim",
                         {"head_dim": D, "d_out": H * D})


def _named(mask=None, kind="", causal=False, scale=None, q=None):
    """The relation for a student call with these arguments (its output
    is what the student got)."""
    q0, k, v = _qkv()
    q = q0 if q is None else q
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                         is_causal=causal, scale=scale)
    tensors = [q, k, v] + ([mask.float()] if mask is not None else [])
    found = _explain(FusedCall(7, scale, causal, 0.0, kind, tensors), got)
    return None if found is None else found.key


def test_each_wrong_argument_is_named_by_its_replay():
    assert _named(mask=HIDE, kind="bool") == "fused: bool mask inverted"
    assert _named(causal=True, scale=math.sqrt(D)) == "fused: scale"
    q, _, _ = _qkv()
    assert _named(causal=True, q=q / math.sqrt(D)) == "fused: scaled twice"
    assert _named(mask=HIDE.float(), kind="float") == \
        "fused: float mask of 0 and 1"


def _mask_words(mask: torch.Tensor, kind: str) -> str | None:
    q, k, v = _qkv()
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    call = FusedCall(7, None, False, 0.0, kind, [q, k, v, mask.float()])
    found = _explain(call, got)
    return None if found is None else f"{found.key}: {found.text}"


def test_a_wrong_causal_mask_is_named_by_where_it_differs():
    below = HIDE.T                        # the buffer transposed: no diagonal
    words = _mask_words(below, "bool")
    assert words.startswith("fused: causal mask")
    assert "hides the keys on the diagonal (each query's own)." in words
    assert "shows" not in words and "below the diagonal (before" not in words
    words = _mask_words(~below, "bool")   # the causal mask transposed
    assert "hides the keys below the diagonal (before the query) and " \
        "shows the keys above the diagonal (after the query)" in words
    # An additive float mask: -inf hides, whatever the spelling.
    additive = torch.zeros(S, S).masked_fill(~below, float("-inf"))
    assert "hides the keys on the diagonal" in _mask_words(additive, "float")
    # -1e9 by hand hides as -inf does: nothing "shown" above the diagonal.
    words = _mask_words(torch.zeros(S, S).masked_fill(~below, -1e9), "float")
    assert "hides the keys on the diagonal" in words and "shows" not in words


def test_scaled_twice_says_which_operand_is_prescaled():
    q, k, v = _qkv()
    q = q / math.sqrt(D)
    got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    found = _explain(FusedCall(7, None, True, 0.0, "", [q, k, v]), got)
    assert "the q it gets is already divided by sqrt(4)" in found.text


def test_controls_stay_silent():
    q, k, v = _qkv()
    # A right call (a bool mask that keeps the past, scale given): none
    # of its arguments is blamed.
    assert _named(mask=~HIDE, kind="bool", scale=1 / math.sqrt(D)) is None
    # A right call whose v is wrong: no fix of the call's arguments
    # gives the reference (say only where).
    wrong_v = v * 2
    got = F.scaled_dot_product_attention(q, k, wrong_v, attn_mask=~HIDE)
    call = FusedCall(7, None, False, 0.0, "bool", [q, k, wrong_v,
                                                   (~HIDE).float()])
    assert _explain(call, got) is None
    # A recorded call that did not give the student's values (another
    # line did): no claim about it.
    call = FusedCall(7, math.sqrt(D), True, 0.0, "", [q, k, v])
    assert _explain(call, torch.zeros(B, H, S, D)) is None
    # A call with dropout is never replayed.
    got = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                         scale=math.sqrt(D))
    call = FusedCall(7, math.sqrt(D), True, 0.1, "", [q, k, v])
    assert _explain(call, got) is None


def test_the_recorder_keeps_the_arguments_and_the_students_line():
    q, k, v = _qkv()
    source = ("import torch.nn.functional as F\n"
              "def run(q, k, v, m):\n"
              "    return F.scaled_dot_product_attention(\n"
              "        q, k, v, attn_mask=m, scale=0.5)\n")
    namespace: dict = {}
    exec(compile(source, "student.py", "exec"), namespace)
    recorder = FusedRecorder("student.py")
    with recorder:
        for _ in range(LIMITS.fused_calls + 1):
            namespace["run"](q, k, v, ~HIDE)
    assert len(recorder.calls) == LIMITS.fused_calls
    call = recorder.calls[0]
    assert call.line in (3, 4) and call.scale == 0.5 and call.mask == "bool"
    assert not call.is_causal and len(call.tensors) == 4
    assert torch.equal(call.tensors[3], (~HIDE).float())
    assert torch.equal(call.tensors[0], q)


def test_fused_calls_cross_the_wire_and_the_wire_bounds_them():
    q, k, v = _qkv()
    result = ProbeResult("p", OK, outputs=[torch.ones(2)],
                         output_kind="tensor", values=[(5, torch.ones(3))],
                         fused=[FusedCall(9, 0.5, True, 0.0, "float",
                                          [q, k, v, HIDE.float()])])
    header, tensors = wire.result_payload(result)
    back = wire.result_from_header(header, tensors, "p")
    assert [line for line, _ in back.values] == [5]
    assert len(back.outputs) == 1
    call = back.fused[0]
    assert (call.line, call.scale, call.is_causal, call.mask) == \
        (9, 0.5, True, "float")
    assert torch.equal(call.tensors[3], HIDE.float())
    entry = header["fused"][0]
    for bad in ({**entry, "n": 5}, {**entry, "mask": "int"},
                {**entry, "scale": float("nan")}, {**entry, "line": -1},
                {**entry, "n": 3}, {**entry, "is_causal": 1}):
        with pytest.raises(wire.BadMessage):
            wire.result_from_header({**header, "fused": [bad]}, tensors, "p")
    with pytest.raises(wire.BadMessage):
        wire.result_from_header(
            {**header, "fused": [entry] * (LIMITS.fused_calls + 1)},
            tensors, "p")


def test_heads_not_split_is_named_by_the_split_replayed():
    q, k, v = _qkv()
    merged = [t.transpose(1, 2).reshape(B, S, H * D) for t in (q, k, v)]
    got = F.scaled_dot_product_attention(*merged, is_causal=True)
    steps = _steps()
    want = steps["context"].transpose(1, 2).reshape(B, S, H * D)
    divergence = Divergence(7, "merged", got, want)
    call = FusedCall(7, None, True, 0.0, "", merged)
    found = fused.explain([call], divergence, {**steps, "merged": want}, D,
                          "head_dim", {"head_dim": D})
    assert found.key == "fused: heads not split"
    assert f"gets q as [{B}, {S}, {H * D}], the heads not split" in \
        found.text and f"into {H} heads of {D}" in found.text
    # Split but wrong otherwise (v doubled): the split is no fix.
    doubled = merged[:2] + [merged[2] * 2]
    got = F.scaled_dot_product_attention(*doubled, is_causal=True)
    call = FusedCall(7, None, True, 0.0, "", doubled)
    assert fused.explain([call], Divergence(7, "merged", got, want),
                         {**steps, "merged": want}, D, "head_dim",
                         {"head_dim": D}) is None


def test_a_replay_whose_scores_would_be_huge_is_not_made():
    """The recorded arguments are capped, their scores matrix is not: a
    call of 65,536 queries against as many keys is never replayed here
    (17 GB in the parent), only refused."""
    big = torch.ones(1 << 16, 1)
    assert fused._replay(big, big, big, None, False, None) is None
    assert fused.MAX_SCORES >= B * H * S * S      # the cases still replay
