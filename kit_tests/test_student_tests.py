"""The student tests (tests/) are the grader's item checks: one test per
rubric item, judged by the grader's code on the public values; failures
explain themselves, and the public values they use are intact."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from autograder import homework
from autograder.local import SCOPE, value_rubric
from autograder.rubric import load_rubric
from autograder.values import ValuesError, load_cases
from kit import variants
from transformer_lm import test_values

REFERENCE = homework.staff().reference
SKELETON = homework.current().module

ROOT = Path(__file__).resolve().parents[1]
ITEMS = [i.id for t in value_rubric(load_rubric()).tasks for i in t.items]


@dataclass
class Run:
    """One run of ``pytest tests`` on an implementation."""

    returncode: int
    output: str
    outcomes: dict[str, tuple[str, str]]  # item id -> (outcome, message)

    def named(self, outcome: str) -> list[str]:
        return [t for t, (o, _) in self.outcomes.items() if o == outcome]


def run_student_tests(implementation: Path | None, tmp_path: Path,
                      *args: str) -> Run:
    """``pytest tests`` with HOMEWORK_IMPL=implementation (unset: None),
    as a student runs it: from the project root, without PYTHONPATH."""
    report = tmp_path / "report.xml"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "HOMEWORK_IMPL")}
    if implementation is not None:
        env["HOMEWORK_IMPL"] = str(implementation)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider",
         f"--junitxml={report}", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    outcomes = {}
    if report.exists():
        for case in ET.parse(report).iter("testcase"):
            name = case.get("name")
            item = name[name.index("[") + 1:-1] if "[" in name else name
            outcome, message = "passed", ""
            for kind in ("failure", "error", "skipped"):
                found = case.find(kind)
                if found is not None:
                    outcome = kind
                    message = found.get("message", "")
            outcomes[item] = (outcome, message)
    return Run(done.returncode, done.stdout + done.stderr, outcomes)


def variant(tmp_path: Path, key: str) -> Path:
    """The catalogue's entry ``group/name`` written to a file."""
    path = tmp_path / "variant_attention.py"
    path.write_text(variants.find(key).source())
    return path


def value_items_lost(key: str) -> set[str]:
    """The rubric items the entry ``key`` must fail that the student tests
    check (the value items; deductions and bonuses are static)."""
    expected = variants.expect(variants.find(key), load_rubric())
    return expected.lost & set(ITEMS)


def test_reference_passes_one_test_per_rubric_item(tmp_path: Path):
    run = run_student_tests(REFERENCE, tmp_path)
    assert run.returncode == 0, run.output
    assert list(run.outcomes) == ITEMS
    assert run.named("passed") == ITEMS
    assert f"implementation under test: {REFERENCE}" in run.output
    assert SCOPE in run.output    # the header says what is checked


def test_skeleton_fails_every_item_with_its_task(tmp_path: Path):
    run = run_student_tests(SKELETON, tmp_path)
    assert run.returncode == 1, run.output  # 1: tests failed, not 2/3/4
    assert run.named("failure") == ITEMS, run.output
    for item, (_, message) in run.outcomes.items():
        # pytest.fail's message: the item, then the grader's reason.
        assert message.startswith(f"Failed: ✘ {item} "), (item, message)
        assert "not implemented yet" in message, (item, message)
    # The skeleton's own frames are noise to a student: none is shown.
    assert "raise NotImplementedError(" not in run.output


def test_default_implementation_is_the_project_skeleton(tmp_path: Path):
    run = run_student_tests(None, tmp_path, "-k", "1.2")
    assert f"implementation under test: {SKELETON}" in run.output
    assert list(run.outcomes) == ["1.2"]
    assert "Task 1.1 not implemented yet" in run.output


def test_a_mistake_fails_its_items_with_the_graders_explanation(tmp_path):
    run = run_student_tests(variant(tmp_path, "examples/no_scale"), tmp_path)
    assert run.returncode == 1
    assert run.named("error") == []
    # The items the grader takes (dropout is judged against the
    # submission's own eval probabilities, so 2.3b passes, as graded).
    assert set(run.named("failure")) == value_items_lost(
        "examples/no_scale"), run.output
    for shown in ("largest difference", "at index [", "expected ", "got ",
                  f"(tolerance {load_rubric().atol:g})",
                  "Common mistake `no_scale`"):
        assert shown in run.output, shown


def test_a_wrong_shape_is_named(tmp_path: Path):
    key = "diagnoses/probs_not_flattened"
    run = run_student_tests(variant(tmp_path, key), tmp_path)
    assert set(run.named("failure")) == value_items_lost(key)
    assert "probabilities not flattened: they have shape [3, 3, 5, 5], " \
        "expected [9, 5, 5]" in run.output


def test_part3_dropout_on_the_output_fails_only_its_item(tmp_path):
    key = "diagnoses/ca_dropout_on_output"
    run = run_student_tests(variant(tmp_path, key), tmp_path)
    assert set(run.named("failure")) == value_items_lost(key) == {"3.1d"}, \
        run.output


# transformer_lm/test_values.py, which ships with the tests.

def test_course_style_values_are_the_course_sized_public_cases():
    cases = {case.name: case.tensors for case in load_cases(sets=("public",))}
    sa, mh = test_values.SelfAttentionTestValues, \
        test_values.MultiHeadAttentionTestValues
    for name in ("x", "q_weight", "q_bias", "k_weight", "k_bias",
                 "v_weight", "v_bias", "output"):
        key = name.replace("_", ".")  # course name -> state-dict path
        assert torch.equal(getattr(sa, name), cases["sa_course"][key])
    for name in ("mix_weight", "mix_bias", "q_bias", "output", "attention"):
        key = name.replace("_", ".")
        assert torch.equal(getattr(mh, name), cases["mhsa_course"][key])
    assert torch.equal(mh.output_causal,
                       cases["mhsa_course_causal"]["output"])
    assert torch.equal(mh.attention_causal,
                       cases["mhsa_course_causal"]["attention"])
    assert not torch.equal(mh.output, mh.output_causal)
    # One set of weights serves both: the causal case must share them.
    for key in ("x", "q.weight", "k.bias", "mix.weight"):
        assert torch.equal(cases["mhsa_course"][key],
                           cases["mhsa_course_causal"][key])


def test_book_example_values_are_the_public_book_cases():
    cases = {case.name: case.tensors for case in load_cases(sets=("public",))}
    book = test_values.BookExampleTestValues
    assert torch.equal(book.batch, cases["ca_book"]["x"])
    assert torch.equal(book.batch, torch.stack((book.inputs, book.inputs)))
    assert torch.equal(book.causal_attention, cases["ca_book"]["output"])
    assert torch.equal(book.wrapper, cases["mhw_book"]["output"])
    assert torch.equal(book.multi_head_attention,
                       cases["mha_book"]["output"])
    assert book.gpt2_small_num_parameters == 2_362_368


def test_load_public_cases_is_the_graders_public_set():
    loaded = test_values.load_public_cases()
    grader = load_cases(sets=("public",))
    assert [case.name for case in loaded] == [case.name for case in grader]
    assert {case.set for case in loaded} == {"public"}


def test_load_public_cases_refuses_a_damaged_file(tmp_path: Path):
    for name in ("manifest.json", "public.safetensors"):
        shutil.copy(ROOT / "test_values" / name, tmp_path / name)
    data = bytearray((tmp_path / "public.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp_path / "public.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValuesError, match="sha256"):
        test_values.load_public_cases(tmp_path)


def test_part3_uncut_mask_fails_only_its_own_unit(tmp_path: Path):
    # The public cases shorter than their context show an uncut mask; the
    # wrapper's item, whose code is right, is not charged for it.
    key = "fidelity/ca_mask_not_cut"
    run = run_student_tests(variant(tmp_path, key), tmp_path)
    failed = run.named("failure")
    assert set(failed) == value_items_lost(key), run.output
    assert "3.1" in failed and all(item.startswith("3.1")
                                   for item in failed), failed
