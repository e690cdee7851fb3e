"""`make new-edition` (kit/generate/edition.py, new_edition.py): every
hidden case redrawn (seed, sizes), its edges and structure kept; in a
copy of the checkout, the new values change every hidden tensor but the
ones it reports, each with a reason, keep the public values, rebuild
byte for byte, and grade the reference and the catalogue's mistakes as
the previous edition did."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from autograder import homework
from autograder.config import load_config
from autograder.grade import grade_source
from autograder.local import in_process_runner
from kit import variants
from kit.generate import cases as base_cases
from kit.generate import edition, new_edition as command
from kit.generate.rubric_change import copy_checkout

REFERENCE = homework.staff().reference

ROOT = Path(__file__).resolve().parents[1]
EDITION = edition.Edition("2031", edition.seed_of("2031"))
STACKED = base_cases.STACKED_HEADS


def _drawn(chosen: edition.Edition = EDITION) -> dict:
    drawn = edition.apply(base_cases.CASES, chosen, STACKED)
    return {c.name: c for c in drawn}


def test_no_edition_is_the_cases_as_written():
    assert edition.apply(base_cases.CASES, None, STACKED) == \
        base_cases.CASES
    assert edition.load(ROOT / "no-such-edition.toml") is None


def test_every_hidden_case_gets_a_new_seed_and_the_public_ones_stay():
    drawn = _drawn()
    for case in base_cases.CASES:
        new = drawn[case.name]
        if case.set == "public":
            assert new == case, case.name
        else:
            assert new.seed != case.seed, case.name
    # Cases that shared a seed (a causal pair) share their new one.
    pairs = [(a.name, b.name) for a in base_cases.CASES
             for b in base_cases.CASES
             if a.name < b.name and a.seed == b.seed and a.set == "hidden"]
    assert pairs
    for a, b in pairs:
        assert drawn[a].seed == drawn[b].seed, (a, b)


def test_sizes_move_and_keep_each_cases_edges_and_structure():
    drawn, moved = _drawn(), 0
    for case in base_cases.CASES:
        if case.set != "hidden":
            continue
        new, stacked = drawn[case.name], case.cls in STACKED
        before, after = edition.sizes(case, stacked), \
            edition.sizes(new, stacked)
        moved += before != after
        assert not edition.coincidences(new, stacked), case.name
        for key, size in before.items():   # 1 stays 1, nothing shrinks
            assert (after[key] == 1) == (size == 1), (case.name, key)
            assert after[key] >= size or key == "head", (case.name, key)
        if "context_length" in case.init:
            assert new.init["context_length"] > new.seq, case.name
        if case.inputs == "identity":
            width_in = next(k for k in ("d_in", "input_size")
                            if k in new.init)
            assert new.seq == new.init[width_in], case.name
        if case.weights == "dropout_probe":
            assert new.init["d_out"] == 2 * new.init["d_in"] * \
                new.init.get("num_heads", 1), case.name
        if case.weights.startswith("concat:"):
            source = drawn[case.weights.split(":", 1)[1]]
            assert new.init["d_out"] == source.init["d_out"] * \
                source.init["num_heads"] and new.seed == source.seed
        assert {k: v for k, v in new.init.items()
                if not edition._is_size(v)} == \
            {k: v for k, v in case.init.items()
             if not edition._is_size(v)}, case.name
    assert moved >= 20


def test_descriptions_say_the_new_sizes():
    drawn = _drawn()
    long = drawn["ca_bias_long"]
    assert long.description == (f"{long.seq} tokens of a context of "
                                f"{long.init['context_length']}, qkv bias")
    assert "dropout 0.3" in drawn["ca_dropout_probe"].description


def test_an_edition_is_reproducible_and_two_editions_differ():
    assert _drawn() == _drawn()
    other = _drawn(edition.Edition("2032", edition.seed_of("2032")))
    assert all(other[n].seed != c.seed for n, c in _drawn().items()
               if c.set == "hidden")


def test_the_edition_file_round_trips_and_a_bad_one_names_the_fix(tmp_path):
    path = tmp_path / edition.FILENAME
    path.write_text(edition.text(EDITION))
    assert edition.load(path) == EDITION
    path.write_text("[edition]\nname = 1\n")
    with pytest.raises(SystemExit, match=r"edition\.toml: not an edition.*"
                       r"make new-edition"):
        edition.load(path)


def test_equal_tensors_are_explained_or_flagged():
    eye = torch.eye(3)
    previous = {"a/x": eye, "a/attention": torch.ones(1, 1, 1),
                "a/mistake.m.output": torch.full((2,), float("nan")),
                "a/output": torch.tensor([0.5, 0.25]),
                "a/moved": torch.tensor([1.0])}
    current = {**previous, "a/moved": torch.tensor([2.0]),
               "a/new": torch.tensor([3.0])}
    found = {r.key: r.reason for r in command.reused(previous, current)}
    assert set(found) == {"a/x", "a/attention", "a/mistake.m.output",
                          "a/output"}
    assert "identity" in found["a/x"] and "one token" in \
        found["a/attention"] and "NaN" in found["a/mistake.m.output"]
    assert found["a/output"] is None          # reused by seed: a failure
    text = command.report(command.reused(previous, current), 5)
    assert text.startswith("4 of 5 hidden tensors") and \
        "NOT EXPLAINED" in text


@pytest.fixture(scope="module")
def edition_copy(tmp_path_factory):
    """A copy of the checkout given `make new-edition`'s command, run
    twice (the second run is the same edition again: its bytes must not
    move); the copy and the first run's output."""
    copy = copy_checkout(ROOT, tmp_path_factory.mktemp("edition"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(copy)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=900)

    first = run("-m", "kit.generate.new_edition", "--edition",
                EDITION.name)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    values = copy / "test_values"
    written = {p.name: p.read_bytes() for p in values.iterdir()}
    again = run("-m", "kit.generate", "test-values")
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in values.iterdir()} == written
    fresh = run("-m", "kit.generate", "--check", "test-values")
    assert fresh.returncode == 0, fresh.stderr
    return copy, first.stdout


def test_a_new_edition_changes_every_hidden_tensor_but_those_it_reports(
        edition_copy):
    copy, stdout = edition_copy
    old = load_file(str(ROOT / "test_values" / "hidden.safetensors"))
    new = load_file(str(copy / "test_values" / "hidden.safetensors"))
    found = command.reused(old, new)
    assert all(r.reason for r in found), [r.key for r in found]
    assert f"{len(found)} of {len(new)} hidden tensors equal" in stdout
    for item in found:
        assert item.key in stdout
    assert len(found) < len(new) // 50
    # The public values are the shipped ones, byte for byte; the
    # manifest records the edition among the values' sources.
    assert (copy / "test_values" / "public.safetensors").read_bytes() == \
        (ROOT / "test_values" / "public.safetensors").read_bytes()
    manifest = json.loads((copy / "test_values" / "manifest.json"
                           ).read_text())
    assert manifest["sources"]["kit/generate/edition.toml"] != "absent"
    assert edition.load(copy / "kit" / "generate" / edition.FILENAME) == \
        EDITION


def _verdicts(source: str, values: Path) -> dict:
    grade = grade_source(source, "modeling_attention.py",
                         load_config(values=values), in_process_runner)
    assert not grade.internal_error, grade.internal_error
    return {c.check.id: (c.outcome.points, c.outcome.passed)
            for t in grade.tasks for c in (*t.items, *t.deductions)}


def _catalogue() -> dict[str, str]:
    base = REFERENCE.read_text()
    entries = variants.load("mistakes", homework.staff().catalogue)
    return {"reference": base,
            **{mid: entry.source(base) for mid, entry in entries.items()}}


# In the quick suite, the reference and two mistakes whose hidden outputs
# are frozen (Part 1's missing scale; Part 3's mask not cut to the tokens,
# which only a sequence shorter than the context shows): each grading
# costs seconds, twice; the whole catalogue is end to end.
QUICK = ("reference", "no_scale", "causal_mask_uncut")


@pytest.mark.parametrize("name", QUICK)
def test_a_new_edition_grades_as_the_last_one(edition_copy, name):
    copy, _ = edition_copy
    source = _catalogue()[name]
    assert _verdicts(source, copy / "test_values") == \
        _verdicts(source, ROOT / "test_values")


@pytest.mark.e2e
def test_every_catalogued_mistake_grades_as_in_the_last_edition(
        edition_copy):
    copy, _ = edition_copy
    moved = {}
    for name, source in _catalogue().items():
        before = _verdicts(source, ROOT / "test_values")
        after = _verdicts(source, copy / "test_values")
        if before != after:
            moved[name] = {k: (before[k], after.get(k)) for k in before
                           if before[k] != after.get(k)}
    assert not moved, moved
