"""The frozen values: reproducible, intact, and agreeing with the reference."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from autograder.values import DEFAULT_DIR, ValuesError, load_cases
from kit import make_test_values, mistakes
from kit.cases import CASES


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("values")
    make_test_values.generate(out, verbose=False)
    return out


@pytest.mark.parametrize("filename", ["public.safetensors",
                                      "hidden.safetensors", "manifest.json"])
def test_regeneration_is_bit_for_bit(regenerated: Path, filename: str):
    committed = (DEFAULT_DIR / filename).read_bytes()
    assert (regenerated / filename).read_bytes() == committed, (
        f"test_values/{filename} is stale: run `make test-values`")


def test_manifest_records_checksums_seeds_and_shapes():
    manifest = json.loads((DEFAULT_DIR / "manifest.json").read_text())
    assert manifest["torch_version"] == torch.__version__
    for filename, info in manifest["files"].items():
        digest = hashlib.sha256((DEFAULT_DIR / filename).read_bytes())
        assert info["sha256"] == digest.hexdigest()
    assert set(manifest["cases"]) == {c.name for c in CASES}
    record = manifest["cases"]["mhsa_course"]
    assert record["seed"] == 2023 and record["tensors"]["x"] == [3, 5, 7]


def test_public_set_has_the_course_sized_cases():
    public = {c.name: c for c in load_cases(sets=("public",))}
    assert public["mhsa_course"].init == {
        "input_size": 7, "hidden": 9, "num_heads": 3, "causal": False,
        "dropout": 0.0}
    assert all(c.set == "public" for c in public.values())
    # The course pair shares input and weights; only the mask differs.
    causal = public["mhsa_course_causal"]
    assert torch.equal(causal.tensors["x"], public["mhsa_course"].tensors["x"])
    assert not torch.equal(causal.tensors["output"],
                           public["mhsa_course"].tensors["output"])


PARTS_1_2 = ("self_attention", "multi_head_self_attention")


def test_hidden_set_covers_the_edges():
    hidden = [c for c in load_cases(sets=("hidden",))
              if c.task in PARTS_1_2]
    sizes = [c.sizes for c in hidden]
    assert any(s["batch_size"] == 1 and s["seq_len"] == 1 for s in sizes)
    assert any(s.get("num_heads") == 1 for s in sizes)
    assert any(s.get("head_size") == 1 for s in sizes)
    assert any(s["seq_len"] >= 32 for s in sizes)
    assert {c.init.get("causal") for c in hidden if c.cls != "SelfAttention"
            } == {True, False}
    assert any(c.mode == "train" and c.init["dropout"] > 0 for c in hidden)


def test_corrupted_file_is_refused(tmp_path: Path, regenerated: Path):
    for name in ("manifest.json", "public.safetensors"):
        (tmp_path / name).write_bytes((regenerated / name).read_bytes())
    data = bytearray((tmp_path / "public.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp_path / "public.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValuesError, match="sha256"):
        load_cases(tmp_path)


def test_missing_hidden_file_is_normal(tmp_path: Path, regenerated: Path):
    for name in ("manifest.json", "public.safetensors"):
        (tmp_path / name).write_bytes((regenerated / name).read_bytes())
    cases = load_cases(tmp_path)
    assert cases and all(c.set == "public" for c in cases)


def test_value_mix_reproduces_output_from_probabilities():
    for case in load_cases():
        if case.mode != "train" or case.task not in PARTS_1_2:
            continue
        b, s, _ = case.tensors["x"].shape
        heads = case.init["num_heads"]
        probs = case.tensors["attention"].view(b, heads, s, s)
        att = torch.einsum("bhst,bhtd->bsd", probs, case.tensors["value_mix"])
        att = att + case.tensors["mix.bias"]
        torch.testing.assert_close(att, case.tensors["output"], atol=1e-5,
                                   rtol=0)


def test_mistake_catalogue_differs_from_the_answer():
    for case in load_cases():
        for mid, outs in case.mistakes.items():
            assert not torch.allclose(outs["output"], case.tensors["output"],
                                      atol=1e-5, equal_nan=True) or (
                "attention" in outs and not torch.allclose(
                    outs["attention"], case.tensors["attention"],
                    atol=1e-5, equal_nan=True)), (case.name, mid)


def test_generator_refuses_a_catalogue_that_disagrees(monkeypatch, tmp_path):
    real = mistakes.self_attention
    monkeypatch.setattr(mistakes, "self_attention",
                        lambda x, w, **kw: real(x, w, **kw) + 1e-3)
    with pytest.raises(SystemExit, match="disagrees with the reference"):
        make_test_values.generate(tmp_path, verbose=False)
