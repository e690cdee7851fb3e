"""The frozen values: reproducible, intact, and agreeing with the reference."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder import homework
from autograder.checks.compare import close
from autograder.values import ValuesError, load_cases
from kit.generate import draws, values as make_test_values
from kit import variants
from kit.generate.cases import CASES


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("values")
    make_test_values.generate(out, verbose=False)
    return out


@pytest.mark.parametrize("filename", ["public.safetensors",
                                      "hidden.safetensors", "manifest.json"])
def test_regeneration_is_bit_for_bit(regenerated: Path, filename: str):
    committed = (homework.current().test_values / filename).read_bytes()
    assert (regenerated / filename).read_bytes() == committed, (
        f"test_values/{filename} is stale: run `make test-values`")


# Another CPU, simulated: torch's portable kernels instead of AVX2/AVX-512
# (vectorised RNG, exp, reductions), MKL's most conservative code path and
# more threads. Under these the old float32 generator changed ~300 tensors.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
             "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
# What the kernels make of float32 work: the capability in use and a
# digest of a float32 random draw and matrix product.
KERNEL_PROBE = (
    "import hashlib, torch; torch.manual_seed(0); a = torch.randn(64, 257);"
    " w = torch.nn.Linear(257, 33).weight.detach();"
    " print(torch.backends.cpu.get_cpu_capability(), hashlib.sha256("
    "str((a @ w.T).view(torch.int32).tolist()).encode()).hexdigest())")


def _run(args: list[str], env: dict[str, str]) -> str:
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, *args], capture_output=True,
                          text=True, cwd=root, timeout=300,
                          env={**os.environ, "PYTHONPATH": root, **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.e2e   # the generator in its own process, on forced kernels
def test_regeneration_with_other_cpu_kernels_is_bit_for_bit(tmp_path: Path):
    """The values do not depend on the CPU's kernels: regenerated with
    torch's float32 kernels forced onto another path, the bytes are the
    committed ones."""
    here = _run(["-c", KERNEL_PROBE], {}).split()
    if here[0] == "DEFAULT":
        pytest.skip("this CPU has only torch's default kernels: no other "
                    "path to force")
    there = _run(["-c", KERNEL_PROBE], OTHER_CPU).split()
    # Control: the forced path really computes float32 differently.
    assert there[0] == "DEFAULT" and there[1] != here[1], (here, there)
    _run(["-c", "import sys; from pathlib import Path; "
          "from kit.generate.values import write; "
          "sys.exit(write(Path(sys.argv[1])))", str(tmp_path)], OTHER_CPU)
    for filename in ("public.safetensors", "hidden.safetensors",
                     "manifest.json"):
        assert (tmp_path / filename).read_bytes() == \
            (homework.current().test_values / filename).read_bytes(), (
                f"{filename} depends on the CPU's kernels")


def test_manifest_records_checksums_seeds_and_shapes():
    manifest = json.loads(
        (homework.current().test_values / "manifest.json").read_text())
    assert manifest["torch_version"] == torch.__version__
    assert manifest["compute"].startswith("float64, rounded once to float32")
    for filename, info in manifest["files"].items():
        digest = hashlib.sha256(
            (homework.current().test_values / filename).read_bytes())
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
    # Shapes may differ (probabilities returned as [b, h, s, s]): close()
    # says "different" then, where torch.allclose would raise.
    for case in load_cases():
        for mid, outs in case.mistakes.items():
            assert not close(outs["output"], case.tensors["output"], 1e-5,
                             equal_nan=True) or (
                "attention" in outs and not close(
                    outs["attention"], case.tensors["attention"], 1e-5,
                    equal_nan=True)), (case.name, mid)


def _mistakes_table() -> dict:
    import tomllib
    return tomllib.loads(
        (homework.staff().catalogue / "mistakes.toml").read_text())


def _catalogue_of(tmp_path: Path, table: dict) -> Path:
    """A copy of kit/variants/ whose mistakes.toml holds ``table``."""
    lines = []
    for mid, entry in table.items():
        lines += [f"[{mid}]"] + [f"{key} = {json.dumps(value)}"
                                 for key, value in entry.items()] + [""]
    folder = tmp_path / "variants"
    folder.mkdir()
    (folder / "mistakes.toml").write_text("\n".join(lines))
    return folder


def _catalogue_with(tmp_path: Path, name: str, edits: list,
                    alone: bool = False) -> Path:
    """A copy of kit/variants/ whose mistake ``name`` has ``edits`` (and
    is its only mistake if ``alone``: the generator then runs no other)."""
    table = _mistakes_table()
    assert name in table
    if alone:
        table = {name: table[name]}
    return _catalogue_of(tmp_path, {
        mid: {**entry, "edits": edits} if mid == name else entry
        for mid, entry in table.items()})


def test_the_catalogue_copy_alone_regenerates_the_values(tmp_path):
    # Control for the refusals below: the copy as such is accepted, and
    # only it is read (its one mistake is the only one frozen, with the
    # committed values; every other tensor is the committed one).
    from safetensors.torch import load_file
    folder = _catalogue_with(tmp_path, "no_mix", variants.load(
        "mistakes")["no_mix"].edits, alone=True)
    make_test_values.generate(tmp_path / "out", verbose=False,
                              catalogue=folder)
    made = load_file(tmp_path / "out" / "public.safetensors")
    committed = load_file(
        homework.current().test_values / "public.safetensors")
    mistakes = {k.split("/", 1)[1].split(".")[1] for k in made
                if "/mistake." in k}
    assert mistakes == {"no_mix"}
    kept = {k for k in committed if "/mistake." not in k
            or "/mistake.no_mix." in k}
    assert set(made) == kept
    assert all(torch.equal(made[k], committed[k]) for k in kept)


def test_generator_refuses_a_mistake_that_changes_nothing(tmp_path):
    # An edit that changes the code but not the answer would freeze no
    # output: the grader could never name the mistake.
    folder = _catalogue_with(tmp_path, "no_mix", [
        ["att = self.mix(att)  # [bs, seq, hidden]",
         "att = self.mix(att * 1)  # [bs, seq, hidden]"]], alone=True)
    with pytest.raises(SystemExit, match=r"mistakes.toml \[no_mix\]: the "
                       r"edited reference gives the right answer"):
        make_test_values.generate(tmp_path / "out", verbose=False,
                                  catalogue=folder)


def test_generator_refuses_an_edit_of_a_comment_only(tmp_path):
    folder = _catalogue_with(tmp_path, "no_mix", [
        ["att = self.mix(att)  # [bs, seq, hidden]",
         "att = self.mix(att)  # [batch, seq, hidden]"]])
    with pytest.raises(SystemExit, match=r"\[no_mix\]: its edits change "
                       r"no code"):
        make_test_values.load_mistakes(catalogue=folder)


def test_generator_refuses_a_mistake_without_explanation(tmp_path):
    folder = _catalogue_with(tmp_path, "no_mix", variants.load(
        "mistakes")["no_mix"].edits)
    text = (folder / "mistakes.toml").read_text()
    (folder / "mistakes.toml").write_text(
        text + '[no_mixing]\nitems = ["2.3a"]\n'
        'edits = [["self.mix(att)", "att"]]\n')
    with pytest.raises(SystemExit, match=r"\[no_mixing\]: a mistake needs "
                       r"`message`"):
        make_test_values.load_mistakes(catalogue=folder)


def test_generator_refuses_a_raise_not_declared(tmp_path):
    # A mistake that raises is frozen as its error only when its entry
    # says `raises = true`; else the generator stops, naming the entry and
    # the case. (The raising entries alone, without it: no other mistake
    # runs before the refusal.)
    raising = {mid: {k: v for k, v in entry.items() if k != "raises"}
               for mid, entry in _mistakes_table().items()
               if entry.get("raises")}
    assert raising, ("no entry of kit/variants/mistakes.toml says `raises "
                     "= true`: this test needs one (or remove it)")
    folder = _catalogue_of(tmp_path, raising)
    named = "|".join(map(re.escape, raising))
    with pytest.raises(SystemExit, match=rf"\[({named})\] raises "
                       r"on \w+: \w+Error"):
        make_test_values.generate(tmp_path / "out", verbose=False,
                                  catalogue=folder)


def test_an_edit_that_no_longer_applies_names_its_entry(tmp_path):
    folder = _catalogue_with(tmp_path, "no_mix", [
        ["att = self.mixer(att)", "att"]])
    with pytest.raises(SystemExit, match=r"mistakes.toml \[no_mix\].*"
                       r"appears 0 times"):
        make_test_values.load_mistakes(catalogue=folder)


def test_draws_reproduce_torchs_linear_init_bit_for_bit():
    """kit/generate/draws.py gives nn.Linear's AVX2/AVX-512 initialisation (so
    the book's seed 123 still gives the book's weights) from integer draws."""
    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("torch's default kernels round the init differently")
    reference = make_test_values.load_reference()
    for case in CASES:
        if case.cls == "gpt2_small_attention":
            continue
        torch.manual_seed(case.seed)
        module = getattr(reference, case.cls)(**case.init)
        torch.manual_seed(case.seed)
        drawn = draws.linear_init(module)
        for name, param in module.named_parameters():
            assert torch.equal(drawn[name], param.detach()), (case.name,
                                                              name)


def test_normal_draws_look_standard_normal():
    torch.manual_seed(0)
    drawn = draws.normal(200, 50)
    assert drawn.dtype == torch.float32 and drawn.shape == (200, 50)
    x = drawn.double()
    assert abs(x.mean()) < 0.03 and abs(x.std() - 1) < 0.03
    assert x.abs().max() <= 6


def test_committed_values_are_fresh():
    from kit.generate.values import check_fresh
    check_fresh()   # raises StaleValues naming what changed


def test_a_changed_reference_makes_the_values_stale(tmp_path):
    # Renaming a variable in the reference: every command that grades or
    # releases with the kit's values says which file changed and what to
    # run, instead of failing later with an unexplained mismatch.
    from kit.generate.values import StaleValues, check_fresh
    REFERENCE = homework.staff().reference
    renamed = tmp_path / "modeling_attention.py"
    renamed.write_text(REFERENCE.read_text().replace("bs", "batch"))
    values = tmp_path / "values"
    values.mkdir()
    OUT = homework.staff().test_values
    manifest = json.loads((OUT / "manifest.json").read_text())
    manifest["sources"][str(renamed)] = manifest["sources"].pop(
        "solutions/transformer_lm/modeling_attention.py")
    (values / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StaleValues, match=r"modeling_attention\.py "
                       r"changed.*make test-values"):
        check_fresh(values, renamed)


def test_a_changed_mistake_variant_makes_the_values_stale(tmp_path):
    # The mistake outputs come from kit/variants/mistakes.toml (read by
    # kit/variants.py, applied by kit/corpus/examples.py): editing any of them
    # makes the values stale.
    from kit.generate.values import StaleValues, check_fresh
    OUT = homework.staff().test_values
    for source in ("kit/variants/mistakes.toml", "kit/variants.py",
                   "kit/corpus/examples.py"):
        manifest = json.loads((OUT / "manifest.json").read_text())
        manifest["sources"][source] = "0" * 64
        (tmp_path / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(StaleValues, match=re.escape(source)):
            check_fresh(tmp_path)
