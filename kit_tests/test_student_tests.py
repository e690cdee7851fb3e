"""The student tests (tests/) judge implementations correctly, and their
failures explain themselves; the public values they use are intact."""
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

from autograder.values import load_cases
from kit.skeleton import REFERENCE, SKELETON
from tests.comparison import assert_close, assert_shape
from transformer_lm import test_values

ROOT = Path(__file__).resolve().parents[1]
Failed = pytest.fail.Exception  # what a failing student test raises


@dataclass
class Run:
    """One run of ``pytest tests`` on an implementation."""

    returncode: int
    output: str
    outcomes: dict[str, tuple[str, str]]  # test id -> (outcome, message)

    def named(self, outcome: str) -> list[str]:
        return [t for t, (o, _) in self.outcomes.items() if o == outcome]


def run_student_tests(implementation: Path, tmp_path: Path) -> Run:
    """``pytest tests`` with ATTENTION_IMPL=implementation, as a student
    runs it: from the project root, without PYTHONPATH."""
    report = tmp_path / f"{implementation.stem}-report.xml"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["ATTENTION_IMPL"] = str(implementation)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider",
         f"--junitxml={report}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    outcomes = {}
    if report.exists():
        for case in ET.parse(report).iter("testcase"):
            test_id = f"{case.get('classname')}::{case.get('name')}"
            outcome, message = "passed", ""
            for kind in ("failure", "error", "skipped"):
                found = case.find(kind)
                if found is not None:
                    outcome = kind
                    message = found.get("message", "")
            outcomes[test_id] = (outcome, message)
    return Run(done.returncode, done.stdout + done.stderr, outcomes)


def broken_reference(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the reference with ``old`` replaced by ``new``."""
    source = REFERENCE.read_text()
    assert old in source, f"the reference no longer contains {old!r}"
    path = tmp_path / "broken_attention.py"
    path.write_text(source.replace(old, new))
    return path


def test_reference_passes_every_test(tmp_path: Path):
    run = run_student_tests(REFERENCE, tmp_path)
    assert run.returncode == 0, run.output
    assert len(run.outcomes) >= 15
    assert run.named("passed") == list(run.outcomes)
    assert f"attention implementation: {REFERENCE}" in run.output


def test_skeleton_fails_every_test_with_its_task(tmp_path: Path):
    run = run_student_tests(SKELETON, tmp_path)
    assert run.returncode == 1, run.output  # 1: tests failed, not 2/3/4
    assert len(run.outcomes) >= 15
    assert run.named("failure") == list(run.outcomes), run.output
    for test_id, (_, message) in run.outcomes.items():
        # A pytest.fail message, not an uncaught "NotImplementedError: ..."
        assert message.startswith("Failed: Task "), (test_id, message)
        assert "not implemented yet" in message, (test_id, message)
    # The skeleton's own frames are noise to a student: none is shown.
    assert "During handling of the above exception" not in run.output
    assert "raise NotImplementedError(" not in run.output


def test_default_implementation_is_the_project_skeleton(tmp_path: Path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ATTENTION_IMPL")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider",
         "-k", "test_forward_matches_frozen_values"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert f"attention implementation: {SKELETON}" in done.stdout
    assert "Task 1.1 not implemented yet" in done.stdout


def test_wrong_values_show_expected_got_index_and_difference(tmp_path):
    no_scaling = broken_reference(
        tmp_path, "q @ k.transpose(2, 3) / self.scale",
        "q @ k.transpose(2, 3)")
    run = run_student_tests(no_scaling, tmp_path)
    assert run.returncode == 1
    failed = run.named("failure")
    assert run.named("error") == []
    assert any("test_attention_probabilities[" in t for t in failed)
    assert any("test_output[mhsa_course]" in t for t in failed)
    # Single-head attention and the causal mask are untouched: they pass.
    assert not any("test_self_attention" in t for t in failed)
    assert not any("test_changing_a_future_token" in t for t in failed)
    assert ("Task 2.1: attention probabilities (case mhsa_course): wrong "
            "values" in run.output)
    for shown in ("max abs difference: ", " at index (", "expected ",
                  "got ", "elements differ by more than atol="):
        assert shown in run.output


def test_wrong_shape_is_named_a_shape_mismatch(tmp_path: Path):
    unmerged = broken_reference(
        tmp_path, "probs = probs.reshape(bs * self.num_heads, seq, seq)",
        "pass")
    run = run_student_tests(unmerged, tmp_path)
    assert run.returncode == 1
    assert ("attention probabilities (case mhsa_course): shape mismatch: "
            "expected shape [9, 5, 5], got shape [3, 3, 5, 5]" in run.output)


def test_missing_mask_fails_the_causal_tests_only(tmp_path: Path):
    no_mask = broken_reference(
        tmp_path, 'scores = scores.masked_fill(future, float("-inf"))',
        "pass")
    run = run_student_tests(no_mask, tmp_path)
    failed = run.named("failure")
    assert failed and all("causal" in t or "future" in t for t in failed), \
        failed
    assert any("test_changing_a_future_token" in t for t in failed)


def test_part3_dropout_on_the_output_fails_the_dropout_tests(tmp_path):
    source = REFERENCE.read_text()
    old = ("        attn_weights = self.dropout(attn_weights)\n"
           "        # [b, num_tokens, num_tokens]\n"
           "        context_vec = attn_weights @ values")
    assert source.count(old) == 1
    path = tmp_path / "dropout_on_output.py"
    path.write_text(source.replace(old, (
        "        context_vec = self.dropout(attn_weights @ values)")))
    run = run_student_tests(path, tmp_path)
    assert run.named("failure") == [
        "tests.test_part3::test_dropout_is_applied_to_the_attention_weights"
        "[ca_dropout_probe_public]"], run.output
    assert "the two halves of each head's output in train mode" in \
        run.output
    assert "Task 3.1" in run.output


def test_part3_uncut_mask_fails_the_mask_test(tmp_path: Path):
    uncut = broken_reference(
        tmp_path, "self.mask.bool()[:num_tokens, :num_tokens]",
        "self.mask.bool()")
    run = run_student_tests(uncut, tmp_path)
    failed = run.named("failure")
    assert "tests.test_part3::test_mask_is_cut_to_the_number_of_tokens" \
        "[CausalAttention]" in failed, run.output
    assert all("test_part3" in t for t in failed)
    # The book's six tokens fill the context of 6; the public cases with
    # fewer tokens than their context show the uncut mask in values too.
    short = {c.name for c in load_cases(sets=("public",))
             if c.task in ("causal_attention", "multi_head_wrapper",
                           "multi_head_attention") and c.mode == "eval"
             and c.tensors["x"].shape[1] < c.init["context_length"]}
    failed_values = {t.split("[", 1)[1].rstrip("]") for t in failed
                     if "test_output_matches_frozen_values" in t}
    assert short and failed_values == short, run.output


def test_part3_scaling_by_d_in_fails_the_values(tmp_path: Path):
    d_in = broken_reference(tmp_path, "attn_scores / keys.shape[-1] ** 0.5",
                            "attn_scores / x.shape[-1] ** 0.5")
    run = run_student_tests(d_in, tmp_path)
    failed = run.named("failure")
    assert "tests.test_part3::test_output_matches_frozen_values[ca_book]" \
        in failed and "Task 3.1: CausalAttention output (case ca_book): " \
        "wrong values" in run.output
    assert not any("test_multi_head" in t or "test_self" in t
                   for t in failed)


# The comparison function itself, in-process.

def test_assert_close_accepts_tiny_differences():
    expected = torch.rand(2, 3)
    assert_close(expected + 1e-7, expected, task="9.9", what="thing")


def test_assert_close_reports_the_worst_element():
    expected = torch.zeros(2, 3, 4)
    got = expected.clone()
    got[1, 2, 3] = 0.5
    got[0, 0, 0] = 0.25
    with pytest.raises(Failed) as failure:
        assert_close(got, expected, task="9.9", what="thing")
    message = str(failure.value)
    assert message.startswith("Task 9.9: thing: wrong values")
    assert "max abs difference: 0.5 at index (1, 2, 3)" in message
    assert "expected 0, got 0.5 there" in message
    assert "2 of 24 elements differ" in message


def test_assert_close_treats_nan_as_wrong():
    got = torch.zeros(3)
    got[1] = float("nan")
    with pytest.raises(Failed, match=r"at index \(1,\)"):
        assert_close(got, torch.zeros(3), task="9.9", what="thing")


def test_assert_shape_names_the_mismatch_and_non_tensors():
    with pytest.raises(Failed, match=r"shape mismatch: expected shape "
                                     r"\[9, 5, 5\], got shape \[3, 3, 5, 5\]"):
        assert_close(torch.zeros(3, 3, 5, 5), torch.zeros(9, 5, 5),
                     task="2.1", what="probs")
    with pytest.raises(Failed, match="expected a torch.Tensor, got tuple"):
        assert_shape((1, 2), [2], task="2.3", what="att")


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


def test_load_public_cases_gives_every_public_case():
    loaded = test_values.load_public_cases()
    grader = load_cases(sets=("public",))
    assert [case.name for case in loaded] == [case.name for case in grader]
    for mine, theirs in zip(loaded, grader):
        assert mine.record["set"] == "public"
        assert mine.record["init"] == theirs.init
        assert mine.tensors.keys() == theirs.tensors.keys()
        # Some mistake values are NaN (a fully masked row): equal_nan.
        assert all(torch.allclose(mine.tensors[k], theirs.tensors[k],
                                  rtol=0, atol=0, equal_nan=True)
                   for k in mine.tensors)


def test_load_public_cases_refuses_a_damaged_file(tmp_path: Path):
    for name in ("manifest.json", "public.safetensors"):
        shutil.copy(test_values.VALUES_DIR / name, tmp_path / name)
    data = bytearray((tmp_path / "public.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp_path / "public.safetensors").write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="sha256"):
        test_values.load_public_cases(tmp_path)
