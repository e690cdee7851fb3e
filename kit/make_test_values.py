"""Regenerate the frozen test values from the reference (`make test-values`).

Deterministic: every case seeds torch with its own seed, computation runs on
one thread, and files are written with sorted keys, so regenerating on the
same torch version gives identical bytes (kit_tests/test_test_values.py).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import torch
from safetensors.torch import save_file

from kit import mistakes
from kit.cases import CASES, Case

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
OUT = ROOT / "test_values"
FILES = {"public": "public.safetensors", "hidden": "hidden.safetensors"}


def load_reference(path: Path = REFERENCE) -> ModuleType:
    """Import the reference module from its file."""
    spec = importlib.util.spec_from_file_location("reference_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case_tensors(case: Case, reference: ModuleType
                 ) -> dict[str, torch.Tensor]:
    """Weights, input, outputs and mistake outputs of one case."""
    if case.cls in PART3_CLASSES:
        return part3_tensors(case, reference)
    torch.manual_seed(case.seed)
    module = getattr(reference, case.cls)(**case.init).eval()
    x = torch.randn(case.batch, case.seq, case.init["input_size"])
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    tensors = {"x": x, **weights}
    with torch.no_grad():
        if case.cls == "SelfAttention":
            tensors["output"] = module(x)
            variants = {
                mid: mistakes.self_attention(x, weights, **kw)
                for mid, kw in mistakes.SELF_ATTENTION_MISTAKES.items()}
            check = mistakes.self_attention(x, weights)
            _assert_agree(case, check, tensors["output"])
            for mid, out in variants.items():
                if _differs(out, tensors["output"]):
                    tensors[f"mistake.{mid}.output"] = out
        else:
            att, probs = module(x, return_attention=True)
            tensors["output"], tensors["attention"] = att, probs
            heads, causal = case.init["num_heads"], case.init["causal"]
            check_att, check_probs = mistakes.multi_head(x, weights, heads,
                                                         causal)
            _assert_agree(case, check_att, att)
            _assert_agree(case, check_probs, probs)
            catalogue = dict(mistakes.MULTI_HEAD_MISTAKES)
            if causal:
                catalogue.update(mistakes.CAUSAL_MISTAKES)
            for mid, kw in catalogue.items():
                m_att, m_probs = mistakes.multi_head(x, weights, heads,
                                                     causal, **kw)
                if _differs(m_att, att) or _differs(m_probs, probs):
                    tensors[f"mistake.{mid}.output"] = m_att
                    tensors[f"mistake.{mid}.attention"] = m_probs
            if case.mode == "train":
                tensors["value_mix"] = mistakes.value_mix(x, weights, heads)
    return {k: v.contiguous() for k, v in tensors.items()}


PART3_CLASSES = ("CausalAttention", "MultiHeadAttentionWrapper",
                 "MultiHeadAttention", "gpt2_small_attention")
# The book's 3-d embeddings of "Your journey starts with one step".
BOOK_INPUTS = torch.tensor([[0.43, 0.15, 0.89],   # Your
                            [0.55, 0.87, 0.66],   # journey
                            [0.57, 0.85, 0.64],   # starts
                            [0.22, 0.58, 0.33],   # with
                            [0.77, 0.25, 0.10],   # one
                            [0.05, 0.80, 0.55]])  # step


def _inputs(case: Case) -> torch.Tensor:
    if case.inputs == "book":
        assert case.seq == 6 and case.input_size == 3, case.name
        return BOOK_INPUTS.expand(case.batch, 6, 3).clone()
    if case.inputs == "identity":
        assert case.seq == case.input_size, case.name
        eye = torch.eye(case.seq)
        return eye.expand(case.batch, case.seq, case.seq).clone()
    return torch.randn(case.batch, case.seq, case.input_size)


def _loadable(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters by state-dict path; buffers (the mask) are left out: a
    student may build the mask in forward."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()
            if k.endswith((".weight", ".bias"))}


def _dropout_probe(case: Case, module: torch.nn.Module) -> None:
    """Values [I; I] per head (and out_proj = I): outputs copy the weights."""
    d_in, d_out = case.init["d_in"], case.init["d_out"]
    assert not case.init["qkv_bias"] and case.init["dropout"] > 0
    assert d_out % (2 * d_in) == 0 and \
        d_out // case.init.get("num_heads", 1) == 2 * d_in, case.name
    with torch.no_grad():
        module.W_value.weight.copy_(torch.eye(d_in).repeat(d_out // d_in, 1))
        if hasattr(module, "out_proj"):
            module.out_proj.weight.copy_(torch.eye(d_out))
            module.out_proj.bias.zero_()


def _concatenated(case: Case, reference: ModuleType
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor],
                             torch.Tensor]:
    """x, the fused weights and the expected output of a "concat:" case."""
    source = next(c for c in CASES if c.name == case.weights[7:])
    init = source.init
    assert source.cls == "MultiHeadAttentionWrapper" and case.init == {
        **init, "d_out": init["d_out"] * init["num_heads"]}, case.name
    found = case_tensors(source, reference)
    weights = {}
    for name in ("W_query", "W_key", "W_value"):
        for part in ("weight", "bias") if init["qkv_bias"] else ("weight",):
            weights[f"{name}.{part}"] = torch.cat([
                found[f"heads.{i}.{name}.{part}"]
                for i in range(init["num_heads"])])
    d_out = case.init["d_out"]
    weights["out_proj.weight"] = torch.eye(d_out)
    weights["out_proj.bias"] = torch.zeros(d_out)
    return found["x"], weights, found["output"]


def part3_tensors(case: Case, reference: ModuleType
                  ) -> dict[str, torch.Tensor]:
    """Input, loadable weights, eval output and mistake outputs of a Part 3
    case; the special cases are described in kit/cases.py."""
    torch.manual_seed(case.seed)
    if case.cls == "gpt2_small_attention":
        module = reference.gpt2_small_attention()
        x = _inputs(case)
        tensors = {"x": x, "num_parameters": torch.tensor(
            sum(p.numel() for p in module.parameters()), dtype=torch.int64)}
        for name, param in module.named_parameters():
            tensors[f"{name}.shape"] = torch.tensor(param.shape,
                                                    dtype=torch.int64)
        return tensors
    module = getattr(reference, case.cls)(**case.init).eval()
    if case.weights.startswith("concat:"):
        x, weights, expected = _concatenated(case, reference)
        missing = module.load_state_dict(weights, strict=False)
        assert set(missing.missing_keys) == {"mask"}, missing
    else:
        if case.weights == "dropout_probe":
            _dropout_probe(case, module)
        x, weights, expected = _inputs(case), _loadable(module), None
    tensors = {"x": x, **weights}
    heads = case.init.get("num_heads", 1)
    with torch.no_grad():
        tensors["output"] = module(x)
        if expected is not None:
            _assert_agree(case, tensors["output"], expected)
        if case.cls == "CausalAttention":
            check, probs = mistakes.causal_attention(x, weights)
            catalogue = mistakes.CAUSAL_MISTAKES_P3

            def variant(kw):
                return mistakes.causal_attention(x, weights, **kw)[0]
        elif case.cls == "MultiHeadAttentionWrapper":
            check, probs = mistakes.multi_head_wrapper(x, weights, heads), None
            catalogue = mistakes.CAUSAL_MISTAKES_P3

            def variant(kw):
                return mistakes.multi_head_wrapper(x, weights, heads, **kw)
        else:
            check, probs = mistakes.multi_head_attention(x, weights, heads)
            catalogue = {**mistakes.CAUSAL_MISTAKES_P3,
                         **mistakes.FUSED_MISTAKES}

            def variant(kw):
                return mistakes.multi_head_attention(x, weights, heads,
                                                     **kw)[0]
        _assert_agree(case, check, tensors["output"])
        for mid, kw in catalogue.items():
            out = variant(kw)
            if _differs(out, tensors["output"]):
                tensors[f"mistake.{mid}.output"] = out
        if case.weights == "dropout_probe":
            tensors["attention"] = probs
            # [A | A] per head: the output copies the attention weights.
            b, n = x.shape[:2]
            halves = tensors["output"].view(b, n, heads, 2, n)
            weights_per_head = probs.view(b, -1, n, n).transpose(1, 2)
            for half in (0, 1):
                _assert_agree(case, halves[:, :, :, half], weights_per_head)
    return {k: v.contiguous() for k, v in tensors.items()}


def _differs(mistake: torch.Tensor, correct: torch.Tensor) -> bool:
    # A mistake that gives the right answer on a case (one head, one token)
    # says nothing there; leave it out rather than name a non-mistake.
    return not torch.allclose(mistake, correct, atol=1e-5, rtol=0,
                              equal_nan=True)


def _assert_agree(case: Case, a: torch.Tensor, b: torch.Tensor) -> None:
    # The catalogue is only trustworthy if its mistake-free variant IS the
    # reference; refuse to write values otherwise.
    if not torch.allclose(a, b, atol=1e-6, rtol=0):
        raise SystemExit(f"{case.name}: kit/mistakes.py disagrees with the "
                         f"reference by {(a - b).abs().max():.3g}")


def generate(out: Path = OUT, reference_path: Path = REFERENCE,
             verbose: bool = True) -> dict:
    """Write public/hidden safetensors files and manifest.json into ``out``."""
    torch.set_num_threads(1)
    reference = load_reference(reference_path)
    out.mkdir(parents=True, exist_ok=True)
    by_set: dict[str, dict[str, torch.Tensor]] = {s: {} for s in FILES}
    manifest: dict = {
        "format": 1,
        "torch_version": torch.__version__,
        "generator": "python -m kit.make_test_values",
        "files": {},
        "cases": {},
    }
    for i, case in enumerate(CASES, 1):
        tensors = case_tensors(case, reference)
        if verbose:
            print(f"[{i:2}/{len(CASES)}] {case.set:6} {case.name}")
        for key, value in tensors.items():
            by_set[case.set][f"{case.name}/{key}"] = value
        manifest["cases"][case.name] = {
            "set": case.set,
            "task": case.task,
            "class": case.cls,
            "init": case.init,
            "mode": case.mode,
            "seed": case.seed,
            "description": case.description,
            "tensors": {k: list(v.shape) for k, v in sorted(tensors.items())},
        }
        if case.inputs != "randn":
            manifest["cases"][case.name]["inputs"] = case.inputs
        if case.weights != "init":
            manifest["cases"][case.name]["weights"] = case.weights
    for set_name, filename in FILES.items():
        path = out / filename
        save_file(dict(sorted(by_set[set_name].items())), str(path),
                  metadata={"format": "pt"})
        manifest["files"][filename] = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "cases": [c.name for c in CASES if c.set == set_name],
        }
    (out / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if verbose:
        print(f"wrote {', '.join(FILES.values())} and manifest.json to {out}")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kit.make_test_values", description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT,
                        help="output directory (default: test_values/)")
    parser.add_argument("--reference", type=Path, default=REFERENCE,
                        help="reference implementation to freeze")
    args = parser.parse_args(argv)
    generate(args.out, args.reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
