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


def case_tensors(case: Case, reference: ModuleType) -> dict[str, torch.Tensor]:
    """Weights, input, outputs and mistake outputs of one case."""
    torch.manual_seed(case.seed)
    module = getattr(reference, case.cls)(**case.init).eval()
    x = torch.randn(case.batch, case.seq, case.init["input_size"])
    weights = {k: v.detach().clone() for k, v in module.state_dict().items()}
    tensors = {"x": x, **weights}
    with torch.no_grad():
        if case.cls == "SelfAttention":
            tensors["output"] = module(x)
            variants = {mid: mistakes.self_attention(x, weights, **kw)
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
