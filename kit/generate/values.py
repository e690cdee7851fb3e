"""Regenerate the frozen test values from the reference (`make test-values`).

Deterministic on any x86-64 CPU: every case seeds torch with its own seed,
weights and inputs are drawn through integer draws only
(kit/generate/draws.py), the outputs are computed in float64 and rounded
once to float32, and files are written with sorted keys, so regenerating
on the same torch version gives identical bytes whatever the CPU's kernels
(kit_tests/test_test_values.py regenerates with other kernels forced and
compares).

Besides the right answers it freezes what each common mistake gives: every
entry of ``kit/variants/mistakes.toml`` is the reference with edits that
make that mistake, run like the reference on the cases of the classes it
touches (its ``raises`` says whether it may raise instead).
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from safetensors.torch import save_file

from autograder import homework
from kit import variants
from kit.generate import draws, edition
from kit.generate.exact import exact
from kit.generate.case_definition import Case
# What the values are built from and the torch-free check, re-exported
# (the kit's commands that grade or release refuse stale values).
from kit.generate.sources import (ROOT, StaleValues, check_fresh,
                                  source_hashes)


def _profile_module(path: Path) -> ModuleType:
    """The module at ``path`` (the profile's cases or steps). Inside the
    kit's checkout it is imported by its dotted name (kit/generate/cases.py
    is ``kit.generate.cases``, homeworks/ffn/kit/cases.py
    ``homeworks.ffn.kit.cases``), so that it is one module with the kit's
    own imports of it; elsewhere (a homework in its own folder, or linked
    in) from its file, under a name of its own."""
    if path.resolve().is_relative_to(ROOT):
        return importlib.import_module(
            ".".join(path.resolve().relative_to(ROOT).with_suffix("").parts))
    name = "homework_" + hashlib.sha256(
        str(path.resolve()).encode()).hexdigest()[:12] + "_" + path.stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module   # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def profile_cases(hw: homework.Homework | None = None) -> list[Case]:
    """The cases of the homework ``hw`` (default: the one in use) as its
    edition draws them (none: as written; kit/generate/edition.py, `make
    new-edition`)."""
    hw = hw or homework.staff()
    cases = _profile_module(hw.cases)
    chosen = edition.load(edition.edition_path(hw.cases))
    return edition.apply(cases.CASES, chosen,
                         getattr(cases, "STACKED_HEADS", ()))


def profile_steps(hw: homework.Homework | None = None) -> ModuleType:
    """The homework ``hw``'s named steps (its ``steps`` definition)."""
    return _profile_module((hw or homework.staff()).steps)


FILES = {"public": "public.safetensors", "hidden": "hidden.safetensors"}


def load_reference(path: Path | None = None) -> ModuleType:
    """Import the reference module from its file (default: the homework
    in use's)."""
    path = path or homework.staff().reference
    spec = importlib.util.spec_from_file_location("reference_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_from_source(source: str, name: str, filename: str) -> ModuleType:
    """A fresh module executed from ``source``, in memory only: an edited
    reference is never written where a release could pick it up."""
    module = ModuleType(name)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def edited_definitions(before: str, after: str) -> frozenset[str]:
    """Names of the top-level classes and functions whose code differs
    between two sources (comments and layout aside)."""
    def definitions(source: str) -> dict[str, str]:
        return {node.name: ast.dump(node) for node in ast.parse(source).body
                if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    old, new = definitions(before), definitions(after)
    return frozenset(name for name in old.keys() | new.keys()
                     if old.get(name) != new.get(name))


@dataclass(frozen=True)
class Mistake:
    """One catalogue mistake: the reference with its edits, run."""

    id: str
    label: str                # where its edits live, for messages
    module: ModuleType        # the edited reference
    edited: frozenset[str]    # the classes (or functions) it changes
    raises: bool              # declared to raise on some cases


def load_mistakes(reference_path: Path | None = None,
                  catalogue: Path | None = None) -> dict[str, Mistake]:
    """id -> :class:`Mistake` of every entry of kit/variants/mistakes.toml
    (in ``catalogue``, default kit/variants/), each checked to change some
    code. SystemExit naming the entry otherwise."""
    try:
        entries = variants.load("mistakes",
                                catalogue or homework.staff().catalogue)
        base = (reference_path or homework.staff().reference).read_text()
        sources = {mid: v.source(base) for mid, v in entries.items()}
    except variants.VariantError as exc:
        raise SystemExit(f"error: {exc}") from None
    found = {}
    for mid, entry in entries.items():
        edited = edited_definitions(base, sources[mid])
        if not edited:
            raise SystemExit(f"{entry.label}: its edits change no code")
        module = module_from_source(sources[mid], f"mistake_{mid}",
                                    f"<{entry.label}>")
        found[mid] = Mistake(mid, entry.label, module, edited,
                             entry.fields.get("raises", False))
    return found


def run_case(module: ModuleType, case: Case, x: torch.Tensor,
             weights: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(output, attention)`` of ``case``'s class from ``module`` (the
    reference, or a mistake's edited copy) in float64 with the float32
    ``weights``, in eval mode, called with the case's keyword arguments
    (``call``); ``attention`` is what a call returning a pair returns
    second (Part 2's multi-head class with ``return_attention=True``),
    else None. Raises what the code raises. ``case`` may be any case with
    ``cls``, ``init`` and ``call`` (the grader's too)."""
    built = _load64(getattr(module, case.cls)(**case.init), weights).eval()
    with torch.no_grad():
        return _pair(built(x.double(), **case.call))


def _pair(returned: torch.Tensor | tuple
          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(output, attention or None) of what a case's call returned."""
    if isinstance(returned, tuple):
        return returned[0], returned[1]
    return returned, None


# How the values are computed, recorded in the manifest. Weights and inputs
# are drawn by kit/generate/draws.py (integer draws, exact float64
# arithmetic); every output is computed in float64 by the reference (and by
# its mistakes' edited copies) under kit/generate/exact.py, whose products,
# sums and softmax are made of correctly rounded elementwise operations in
# a fixed order, then
# rounded once to float32: no CPU kernel (AVX2, AVX-512, MKL's code path,
# threads) changes a bit. kit_tests/test_test_values.py regenerates with
# other kernels forced.
COMPUTE = ("float64, rounded once to float32 (products, sums and softmax "
           "in a fixed order: kit/generate/exact.py)")
DRAWS = ("kit/generate/draws.py: nn.Linear's initialisation reproduced "
         "from integer draws of torch's seeded generator; inputs: sum of 12 "
         "uniforms - 6")


def _rounded(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(torch.float32) if tensor.is_floating_point() else tensor


def _draw_module(case: Case, reference: ModuleType, init: dict
                 ) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The reference module of ``case`` and its seeded float32 parameters
    (the mask buffer is built by the module, not drawn)."""
    torch.manual_seed(case.seed)
    module = getattr(reference, case.cls)(**init).eval()
    torch.manual_seed(case.seed)
    return module, draws.draw_parameters(module)


def _load64(module: torch.nn.Module, weights: dict[str, torch.Tensor]
            ) -> torch.nn.Module:
    """``module`` in float64 holding exactly the float32 ``weights``."""
    missing = module.load_state_dict(weights, strict=False)
    assert not missing.unexpected_keys and all(
        k.rpartition(".")[2] == "mask" for k in missing.missing_keys), missing
    return module.double()


def case_tensors(case: Case, reference: ModuleType,
                 mistakes: dict[str, Mistake] | None = None
                 ) -> dict[str, torch.Tensor]:
    """Weights, input, outputs and mistake outputs of one case (float32);
    :func:`case_record` also gives the mistakes that raise."""
    return case_record(case, reference, mistakes)[0]


def case_record(case: Case, reference: ModuleType,
                mistakes: dict[str, Mistake] | None = None,
                hw: homework.Homework | None = None
                ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of one case of the homework ``hw`` (default: the one
    in use), and the error message of each catalogue mistake (of
    ``mistakes``; none by default) that raises on it instead of returning
    an output."""
    if case.sizes_only:
        return _size_record(case, reference), {}
    module, weights = _draw_module(case, reference, case.init)
    steps = profile_steps(hw)
    layers = steps.layers(case.cls)   # step -> the layer computing it
    expected = None
    if case.weights.startswith("concat:"):
        x, weights, expected = _concatenated(case, reference, hw, layers)
    else:
        x = _inputs(case)
        if case.weights == "dropout_probe":
            _dropout_probe(case, weights, layers)
    module = _load64(module, weights)
    x64 = x.double()
    tensors: dict[str, torch.Tensor] = {"x": x, **weights}
    # The classes this case runs (the wrapper's heads are CausalAttention):
    # a mistake whose edits touch none of them cannot show here.
    runs = {type(m).__name__ for m in module.modules()}
    with torch.no_grad():
        plain = module(x64)          # float64 with the CPU's own kernels
    weights64 = _attention_weights(module, x64) \
        if case.weights == "dropout_probe" else None
    with torch.no_grad(), exact():
        out64, probs64 = _pair(module(x64, **case.call))
        # kit/generate/exact.py's operations agree with torch's to float64
        # rounding.
        _assert_agree(case, out64, plain, 1e-12, "kit/generate/exact.py")
        tensors["output"] = _rounded(out64)
        # The named steps the diagnosis follows (kit/generate/steps.py), in
        # eval mode like the output.
        found = steps.reference_steps(case.cls, case.init, module, x64)
        if found:
            _assert_agree(case, found["step.output"], out64, 1e-12,
                          "kit/generate/steps.py's last step")
        tensors.update({k: _rounded(v) for k, v in found.items()})
        if probs64 is not None:
            tensors["attention"] = _rounded(probs64)
        if expected is not None:
            _assert_agree(case, tensors["output"], expected,
                          what="the wrapper's concatenated heads")
        errors = _mistake_records(case, mistakes or {}, runs, x, weights,
                                  tensors)
        for extra in case.extras:
            if extra not in EXTRAS:
                raise SystemExit(f"{case.name}: unknown extra {extra!r} "
                                 f"(known: {', '.join(EXTRAS)})")
            tensors[extra] = _rounded(EXTRAS[extra](module, x64, case,
                                                    layers))
        if weights64 is not None:
            heads = case.size("heads", 1)
            b, n = x.shape[:2]
            tensors["attention"] = _rounded(weights64).reshape(
                (b, n, n) if heads == 1 else (b, heads, n, n))
            # [A | A] per head: the output copies the attention weights.
            halves = out64.view(b, n, heads, 2, n)
            per_head = weights64.view(b, -1, n, n).transpose(1, 2)
            for half in (0, 1):
                _assert_agree(case, halves[:, :, :, half], per_head,
                              what="the dropout probe's output")
    return {k: v.contiguous() for k, v in tensors.items()}, errors


def _size_record(case: Case, reference: ModuleType
                 ) -> dict[str, torch.Tensor]:
    """A size-only case (GPT-2's attention): its input, the parameter
    count and each parameter's shape; no output is frozen."""
    module, _ = _draw_module(case, reference, {})
    tensors = {"x": _inputs(case), "num_parameters": torch.tensor(
        sum(p.numel() for p in module.parameters()), dtype=torch.int64)}
    for name, param in module.named_parameters():
        tensors[f"{name}.shape"] = torch.tensor(param.shape,
                                                dtype=torch.int64)
    return tensors


def _mistake_records(case: Case, mistakes: dict[str, Mistake],
                     runs: set[str], x: torch.Tensor,
                     weights: dict[str, torch.Tensor],
                     tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """Add to ``tensors`` what each mistake touching a class in ``runs``
    gives on ``case`` where it differs from the reference's (its output,
    and its attention when the case freezes one); return the first line
    of the error of each mistake that raises instead. Runs under the
    caller's ``exact()``."""
    errors: dict[str, str] = {}
    for mid, mistake in mistakes.items():
        if not mistake.edited & runs:
            continue
        try:
            out, att = run_case(mistake.module, case, x, weights)
        except Exception as exc:   # noqa: BLE001 - the mistake's error
            if not mistake.raises:
                raise SystemExit(
                    f"{mistake.label} raises on {case.name}: "
                    f"{type(exc).__name__}: {exc} (if it should, say "
                    f"`raises = true` in its entry)"
                ) from exc
            errors[mid] = str(exc).splitlines()[0]
            continue
        out = _rounded(out)
        if "attention" not in tensors:
            if _differs(out, tensors["output"]):
                tensors[f"mistake.{mid}.output"] = out
            continue
        att = _rounded(att)
        if _differs(out, tensors["output"]) or \
                _differs(att, tensors["attention"]):
            tensors[f"mistake.{mid}.output"] = out
            tensors[f"mistake.{mid}.attention"] = att
    return errors


def _attention_weights(module: torch.nn.Module, x64: torch.Tensor
                       ) -> torch.Tensor:
    """The attention weights ``module`` computes on ``x64`` (under
    kit/generate/exact.py): what its one dropout layer receives, as the
    docstrings of Part 3 specify (dropout on the attention weights)."""
    seen = []
    hooks = [m.register_forward_hook(lambda _m, args, _out:
                                     seen.append(args[0]))
             for m in module.modules() if isinstance(m, torch.nn.Dropout)]
    try:
        with torch.no_grad(), exact():
            module(x64)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(seen) == 1, f"{len(seen)} dropout calls"
    return seen[0]


def _value_mix(module: torch.nn.Module, x64: torch.Tensor, case: Case,
               layers: dict[str, str]) -> torch.Tensor:
    """``[b, h, s, hidden]`` tensor G with att = einsum(P, G) + mix.bias,
    from the reference module's own layers (``layers``: the steps
    definition's, step -> attribute).

    ``att`` is affine in the attention probabilities P, so any returned
    probabilities (dropped out or not) determine the output they should
    give; the grader checks train-mode outputs this way.
    """
    bs, seq, _ = x64.shape
    value = getattr(module, layers["v"])
    mix = getattr(module, layers["output"])
    heads = case.size("heads", 1)
    size = value.out_features // heads
    v = value(x64).view(bs, seq, heads, size).transpose(1, 2)
    w_mix = mix.weight.view(-1, heads, size)
    return v @ w_mix.permute(1, 2, 0)   # [b, h, t, k] @ [h, k, d]


# The extra tensors a case may freeze (its ``extras``), by name.
EXTRAS = {"value_mix": _value_mix}


# The book's 3-d embeddings of "Your journey starts with one step".
BOOK_INPUTS = torch.tensor([[0.43, 0.15, 0.89],   # Your
                            [0.55, 0.87, 0.66],   # journey
                            [0.57, 0.85, 0.64],   # starts
                            [0.22, 0.58, 0.33],   # with
                            [0.77, 0.25, 0.10],   # one
                            [0.05, 0.80, 0.55]])  # step


def _inputs(case: Case) -> torch.Tensor:
    if case.inputs == "book":
        assert case.seq == 6 and case.in_size == 3, case.name
        return BOOK_INPUTS.expand(case.batch, 6, 3).clone()
    if case.inputs == "identity":
        assert case.seq == case.in_size, case.name
        eye = torch.eye(case.seq)
        return eye.expand(case.batch, case.seq, case.seq).clone()
    return draws.normal(case.batch, case.seq, case.in_size)


def _dropout_probe(case: Case, weights: dict[str, torch.Tensor],
                   layers: dict[str, str]) -> None:
    """Values [I; I] per head (and the output layer = I): outputs copy the
    weights (``layers``: step -> attribute, the steps definition's)."""
    size_in, size_out = case.size("input"), case.size("width")
    value, out = layers["v"], layers.get("output")
    assert f"{value}.bias" not in weights and case.init["dropout"] > 0
    assert size_out % (2 * size_in) == 0 and \
        size_out // case.size("heads", 1) == 2 * size_in, case.name
    weights[f"{value}.weight"] = torch.eye(size_in).repeat(
        size_out // size_in, 1)
    if out is not None and f"{out}.weight" in weights:
        weights[f"{out}.weight"] = torch.eye(size_out)
        weights[f"{out}.bias"] = torch.zeros(size_out)


def _concatenated(case: Case, reference: ModuleType,
                  hw: homework.Homework | None, layers: dict[str, str]
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor],
                             torch.Tensor]:
    """x, the fused weights and the expected output of a "concat:" case
    (``layers``: the fused class's step -> attribute)."""
    source = next(c for c in profile_cases(hw)
                  if c.name == case.weights[7:])
    heads, width = source.size("heads"), source.arguments["width"]
    # The source is a stack of heads (``heads.<i>.``) of its width each.
    assert case.init == {
        **source.init, width: source.init[width] * heads}, case.name
    found = case_record(source, reference, None, hw)[0]   # no mistakes
    names = [layers[step] for step in ("q", "k", "v")]
    assert f"heads.{heads - 1}.{names[0]}.weight" in found, \
        f"{case.name}: {source.name} is not a stack of heads"
    weights = {}
    for name in names:
        for part in ("weight", "bias") if f"heads.0.{name}.bias" in found \
                else ("weight",):
            weights[f"{name}.{part}"] = torch.cat([
                found[f"heads.{i}.{name}.{part}"] for i in range(heads)])
    size_out = case.size("width")
    weights[f"{layers['output']}.weight"] = torch.eye(size_out)
    weights[f"{layers['output']}.bias"] = torch.zeros(size_out)
    return found["x"], weights, found["output"]


def _differs(mistake: torch.Tensor, correct: torch.Tensor) -> bool:
    # A mistake that gives the right answer on a case (one head, one token)
    # says nothing there; leave it out rather than name a non-mistake.
    return mistake.shape != correct.shape or not torch.allclose(
        mistake, correct, atol=1e-5, rtol=0, equal_nan=True)


def _assert_agree(case: Case, a: torch.Tensor, b: torch.Tensor,
                  atol: float = 1e-6, what: str = "") -> None:
    # Two computations of one answer must agree before it is frozen.
    if not torch.allclose(a.double(), b.double(), atol=atol, rtol=0):
        raise SystemExit(f"{case.name}: {what} disagrees with the "
                         f"reference by {(a - b).abs().max():.3g}")


def _check_shown(mistakes: dict[str, Mistake], shown: set[str],
                 raised: set[str]) -> None:
    """SystemExit unless every mistake changes an output on some case (an
    edit that makes no mistake, or one no case can see, would never be
    named) and exactly the mistakes declared to raise raise."""
    for mid, mistake in mistakes.items():
        if mid not in shown | raised:
            raise SystemExit(f"{mistake.label}: the edited reference gives "
                             f"the right answer on every case: its edits "
                             f"make no mistake a case can show")
        if mistake.raises != (mid in raised):
            raise SystemExit(
                f"{mistake.label}: its entry says raises = "
                f"{str(mistake.raises).lower()}, but it "
                f"{'raises' if mid in raised else 'never raises'}")


def _case_entry(case: Any, tensors: dict[str, torch.Tensor],
                errors: Any, steps: Any) -> dict:
    """One case's manifest entry: what it is, its tensors' shapes, and
    what the grader reads of it that is not the default."""
    entry = {
        "set": case.set,
        "task": case.task,
        "class": case.cls,
        "init": case.init,
        "mode": case.mode,
        "seed": case.seed,
        "description": case.description,
        "tensors": {k: list(v.shape) for k, v in sorted(tensors.items())},
    }
    optional = {"call": case.call, "scale": steps.scale(case.cls, case.init),
                "layers": steps.layers(case.cls),
                "arguments": case.arguments,
                "inputs": case.inputs if case.inputs != "randn" else None,
                "weights": case.weights if case.weights != "init" else None,
                "same_sizes": case.same_sizes, "mistake_errors": errors}
    entry.update((k, v) for k, v in optional.items()
                 if v is not None and v != {} and v != "" and v != []
                 and v != ())
    return entry


def generate(out: Path | None = None, reference_path: Path | None = None,
             verbose: bool = True, catalogue: Path | None = None,
             hw: homework.Homework | None = None) -> dict:
    """Write public/hidden safetensors files and manifest.json into ``out``
    (the mistakes from ``catalogue``, default kit/variants/) for the
    homework ``hw`` (default: the one in use), read once here (its values
    folder and reference unless ``out``, ``reference_path``)."""
    hw = hw or homework.staff()
    out, reference_path = out or hw.test_values, \
        reference_path or hw.reference
    cases, steps = profile_cases(hw), profile_steps(hw)
    torch.set_num_threads(1)
    reference = load_reference(reference_path)
    mistakes = load_mistakes(reference_path, catalogue or hw.catalogue)
    shown: set[str] = set()
    raised: set[str] = set()
    out.mkdir(parents=True, exist_ok=True)
    by_set: dict[str, dict[str, torch.Tensor]] = {s: {} for s in FILES}
    manifest: dict = {
        "format": 1,
        "torch_version": torch.__version__,
        "generator": "python -m kit.generate test-values",
        "compute": COMPUTE,
        "draws": DRAWS,
        "sources": source_hashes(reference_path, hw),
        "files": {},
        "cases": {},
    }
    for i, case in enumerate(cases, 1):
        tensors, errors = case_record(case, reference, mistakes, hw)
        shown |= {key.split(".")[1] for key in tensors
                  if key.startswith("mistake.")}
        raised |= set(errors)
        if verbose:
            print(f"[{i:2}/{len(cases)}] {case.set:6} {case.name}")
        for key, value in tensors.items():
            by_set[case.set][f"{case.name}/{key}"] = value
        manifest["cases"][case.name] = _case_entry(case, tensors, errors,
                                                   steps)
    _check_shown(mistakes, shown, raised)
    for set_name, filename in FILES.items():
        path = out / filename
        save_file(dict(sorted(by_set[set_name].items())), str(path),
                  metadata={"format": "pt"})
        # safetensors writes 0600; the values are read by other users (the
        # grader's test user, a worker that dropped privileges), as after a
        # git checkout.
        path.chmod(0o644)
        manifest["files"][filename] = {
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "cases": [c.name for c in cases if c.set == set_name],
        }
    (out / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if verbose:
        print(f"wrote {', '.join(FILES.values())} and manifest.json to {out}")
    return manifest


def write(out: Path | None = None, reference: Path | None = None) -> int:
    """Freeze the values into ``out`` (the generators' ``write``: 0);
    ``make test-values`` (``python -m kit.generate test-values``)."""
    generate(out, reference)
    return 0
