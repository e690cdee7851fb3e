"""The frozen Part 3 values: the book's example, the edges, and the special
cases the grader relies on (dropout probes, wrapper/fused equivalence,
GPT-2 sizes)."""
from __future__ import annotations

import json

import pytest
import torch

from autograder import homework
from autograder.values import load_cases
from kit.generate.cases import CASES, PART3, TASKS
from kit.generate.values import load_mistakes, load_reference, run_case

PART3_TASKS = {"causal_attention", "multi_head_wrapper",
               "multi_head_attention", "gpt2_small_attention"}
BOOK_CAUSAL = torch.tensor([[-0.4519, 0.2216], [-0.5874, 0.0058],
                            [-0.6300, -0.0632], [-0.5675, -0.0843],
                            [-0.5526, -0.0981], [-0.5299, -0.1081]])
BOOK_FUSED = torch.tensor([[0.3190, 0.4858], [0.2943, 0.3897],
                           [0.2856, 0.3593], [0.2693, 0.3873],
                           [0.2639, 0.3928], [0.2575, 0.4028]])


@pytest.fixture(scope="module")
def cases() -> dict:
    return {c.name: c for c in load_cases() if c.task in PART3_TASKS}


def test_every_part3_task_has_public_and_hidden_cases(cases):
    assert {c.name for c in PART3} == set(cases)
    for task in PART3_TASKS - {"gpt2_small_attention"}:
        sets = {c.set for c in cases.values() if c.task == task}
        assert sets == {"public", "hidden"}, task
    assert TASKS["MultiHeadAttention"] == "multi_head_attention"


def test_book_example_is_public_with_the_books_values(cases):
    for name in ("ca_book", "mhw_book", "mha_book"):
        case = cases[name]
        assert case.set == "public" and case.seed == 123
        assert case.init["d_in"] == 3 and case.init["context_length"] == 6
        assert case.tensors["x"][0, 0].tolist() == pytest.approx(
            [0.43, 0.15, 0.89])
    torch.testing.assert_close(cases["ca_book"].tensors["output"][0],
                               BOOK_CAUSAL, atol=5e-5, rtol=0)
    torch.testing.assert_close(cases["mhw_book"].tensors["output"][1, :, :2],
                               BOOK_CAUSAL, atol=5e-5, rtol=0)
    torch.testing.assert_close(cases["mha_book"].tensors["output"][0],
                               BOOK_FUSED, atol=5e-5, rtol=0)


def test_hidden_cases_cover_the_edges(cases):
    hidden = [c for c in cases.values() if c.set == "hidden"]
    for task in ("causal_attention", "multi_head_wrapper",
                 "multi_head_attention"):
        mine = [c for c in hidden if c.task == task]
        assert any(c.tensors["x"].shape[:2] == (1, 1) for c in mine), task
        # Shorter than the context: an uncut mask fails.
        assert any(c.tensors["x"].shape[1] < c.init["context_length"] > 1
                   for c in mine), task
        assert {c.init["qkv_bias"] for c in mine} == {True, False}, task
    assert any(c.init.get("num_heads", 0) >= 6 for c in hidden)


def test_weights_are_parameters_only(cases):
    for case in cases.values():
        assert "mask" not in case.tensors
        assert all(k.endswith((".weight", ".bias")) for k in case.weights)
        assert not any(k.endswith(".shape") for k in case.weights)
    assert set(cases["mhw_book"].weights) == {
        f"heads.{i}.{n}.weight" for i in (0, 1)
        for n in ("W_query", "W_key", "W_value")}
    assert "out_proj.bias" in cases["mha_book"].weights
    assert "W_query.bias" in cases["mha_bias_long"].weights
    assert "W_query.bias" not in cases["mha_book"].weights


DROPOUT_PROBES = [c.name for c in PART3 if c.weights == "dropout_probe"]
CONCAT = [(c.name, c.weights.split(":", 1)[1]) for c in PART3
          if c.weights.startswith("concat:")]


def test_special_cases_exist_public_and_hidden():
    for names in (DROPOUT_PROBES, [fused for fused, _ in CONCAT]):
        sets = {c.set for c in PART3 if c.name in names}
        assert sets == {"public", "hidden"}, names


@pytest.mark.parametrize("name", DROPOUT_PROBES)
def test_dropout_probe_outputs_copy_the_attention_weights(cases, name):
    case = cases[name]
    x, out, att = (case.tensors[k] for k in ("x", "output", "attention"))
    b, n, d_in = x.shape
    heads = case.init.get("num_heads", 1)
    assert case.mode == "train" and case.init["dropout"] > 0
    assert n == d_in and torch.equal(x, torch.eye(n).expand(b, n, n))
    assert torch.equal(case.tensors["W_value.weight"],
                       torch.eye(n).repeat(2 * heads, 1))
    if heads > 1 or "out_proj.weight" in case.tensors:
        assert torch.equal(case.tensors["out_proj.weight"],
                           torch.eye(2 * n * heads))
    halves = out.view(b, n, heads, 2, n)
    per_head = att.view(b, heads, n, n).transpose(1, 2)
    for half in (0, 1):
        torch.testing.assert_close(halves[:, :, :, half], per_head,
                                   atol=1e-6, rtol=0)
    # Causal: the future has weight 0, the rest sums to 1.
    assert (att.view(b, heads, n, n)[..., torch.ones(n, n).triu(1).bool()]
            == 0).all()
    torch.testing.assert_close(att.sum(-1), torch.ones(att.shape[:-1]))


def _dropped_out(case, weights_first: bool) -> torch.Tensor:
    """Simulate a train-mode forward pass with dropout before (on the
    weights) or after (on the output) the weighted sum."""
    p = case.init["dropout"]
    generator = torch.Generator().manual_seed(0)
    out, att = case.tensors["output"], case.tensors["attention"]
    if weights_first:
        keep = torch.rand(att.shape, generator=generator) >= p
        dropped = att * keep / (1 - p)
        b, n = out.shape[:2]
        heads = case.init.get("num_heads", 1)
        per_head = dropped.view(b, heads, n, n).transpose(1, 2)
        return torch.cat([per_head, per_head], -1).reshape(out.shape)
    keep = torch.rand(out.shape, generator=generator) >= p
    return out * keep / (1 - p)


@pytest.mark.parametrize("name", DROPOUT_PROBES)
def test_dropout_probe_tells_weights_from_output_dropout(cases, name):
    """The documented check: halves equal, entries 0 or eval / (1 - p),
    some dropped and some kept."""
    case = cases[name]
    b, n = case.tensors["x"].shape[:2]
    heads = case.init.get("num_heads", 1)

    def passes(out: torch.Tensor) -> bool:
        p = case.init["dropout"]
        halves = out.view(b, n, heads, 2, n)
        first, second = halves[:, :, :, 0], halves[:, :, :, 1]
        want = case.tensors["attention"].view(b, heads, n, n).transpose(1, 2)
        scaled = want / (1 - p)
        each = ((first == 0) | torch.isclose(first, scaled, atol=1e-6,
                                             rtol=0)).all()
        dropped = ((first == 0) & (want > 0)).any()
        kept = ((first != 0) & (want > 0)).any()
        return bool(torch.equal(first, second) and each and dropped and kept)

    assert passes(_dropped_out(case, weights_first=True))
    assert not passes(_dropped_out(case, weights_first=False))
    assert not passes(case.tensors["output"])  # dropout never applied


@pytest.mark.parametrize("fused, wrapper", CONCAT)
def test_fused_equivalence_cases(cases, fused, wrapper):
    f, w = cases[fused], cases[wrapper]
    heads = w.init["num_heads"]
    assert f.init == {**w.init, "d_out": w.init["d_out"] * heads}
    assert torch.equal(f.tensors["x"], w.tensors["x"])
    for name in ("W_query", "W_key", "W_value"):
        for part in ("weight", "bias") if w.init["qkv_bias"] else ("weight",):
            assert torch.equal(f.tensors[f"{name}.{part}"], torch.cat(
                [w.tensors[f"heads.{i}.{name}.{part}"]
                 for i in range(heads)]))
    d = f.init["d_out"]
    assert torch.equal(f.tensors["out_proj.weight"], torch.eye(d))
    assert torch.equal(f.tensors["out_proj.bias"], torch.zeros(d))
    torch.testing.assert_close(f.tensors["output"], w.tensors["output"],
                               atol=1e-6, rtol=0)


def test_gpt2_case_holds_sizes_not_weights(cases):
    case = cases["gpt2_small"]
    assert case.weights == {} and case.set == "public"
    assert case.tensors["num_parameters"].item() == 2_362_368
    assert case.tensors["x"].shape == (2, 5, 768)
    assert case.tensors["W_query.weight.shape"].tolist() == [768, 768]
    assert case.tensors["out_proj.bias.shape"].tolist() == [768]


def test_part3_mistakes_are_explained_and_the_catalogue_agrees(cases):
    import tomllib
    messages = tomllib.loads(
        (homework.current().test_values.parent / "autograder"
         / "mistakes.toml").read_text())
    ids = {mid for mid, m in load_mistakes().items()
           if m.edited & {c.cls for c in PART3}}
    assert ids <= set(messages)
    manifest = json.loads(
        (homework.current().test_values / "manifest.json").read_text())
    raised = {mid for name in cases for mid in
              manifest["cases"][name].get("mistake_errors", {})}
    seen = {mid for c in cases.values() for mid in c.mistakes}
    assert seen | raised == ids
    # A mistake without an output is frozen as its error, and says so.
    assert raised == {m for m in ids if messages[m].get("raises")}
    case = cases["mha_bias_long"]
    out, _ = run_case(load_reference(), case, case.tensors["x"],
                      case.weights)
    torch.testing.assert_close(out.float(), case.tensors["output"],
                               atol=1e-6, rtol=0)


def test_manifest_records_the_special_inputs_and_weights():
    manifest = json.loads(
        (homework.current().test_values / "manifest.json").read_text())
    record = manifest["cases"]
    assert record["ca_book"]["inputs"] == "book"
    assert record["mha_equiv_book"]["weights"] == "concat:mhw_book"
    assert record["ca_dropout_probe"]["weights"] == "dropout_probe"
    assert "inputs" not in record["mhsa_course"]
    # Part 3 is one run of CASES, in its own order (later parts follow it).
    names = [c.name for c in CASES]
    start = names.index(PART3[0].name)
    assert names[start:start + len(PART3)] == [c.name for c in PART3]
