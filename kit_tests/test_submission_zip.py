"""``make submission`` in the student release, and the grader's round trip.

The release is built once (unverified, ~3 s); each test works on its own
copy, running the release's Makefile with ``PY=`` set to this kit's
interpreter.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.report.layout import submission_dir
from autograder.rubric import load_rubric
from kit.release import student as release
from kit.corpus.examples import example_sources

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
FULL = load_rubric().max_score + load_rubric().max_bonus   # the reference
MODULE = "transformer_lm/modeling_attention.py"
NOTEBOOK = "assignment/attention.ipynb"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return release.build(tmp_path_factory.mktemp("dist"), verify=False)[0]


@pytest.fixture
def student(built, tmp_path) -> Path:
    copy = tmp_path / "student"
    shutil.copytree(built, copy)
    shutil.copy2(copy / MODULE, tmp_path / "skeleton.py")
    return copy


def _submission(directory: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(["make", "--no-print-directory", "submission",
                           f"PY={sys.executable}"], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=300)


def _answer(student: Path, question: str, text: str) -> None:
    path = student / NOTEBOOK
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells
                if c.metadata.get("kit", {}).get("question") == question)
    cell.source = f"**Answer {question}:**\n\n{text}"
    nbformat.write(nb, str(path))


def _one_task_done(student: Path) -> None:
    """Task 1.1 written, its markers deleted; every other task untouched."""
    source = (student / MODULE).read_text()
    start = source.index("        # YOUR CODE STARTS HERE\n        raise "
                         "NotImplementedError(\n            \"Task 1.1")
    end = source.index("# YOUR CODE ENDS HERE", start) + len(
        "# YOUR CODE ENDS HERE")
    (student / MODULE).write_text(
        source[:start] + "        self.q = nn.Linear(input_size, hidden)  "
        "# [input_size, hidden]" + source[end:])


def test_zip_holds_module_and_notebook(student):
    # One task written (without its markers) is enough to build.
    _one_task_done(student)
    done = _submission(student)
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(student / "submission.zip") as zf:
        assert sorted(zf.namelist()) == sorted([MODULE, NOTEBOOK])
        assert zf.read(MODULE) == (student / MODULE).read_bytes()
    assert "Upload submission.zip" in done.stdout
    # the skeleton notebook is unanswered: a warning, not a refusal
    assert "warning: no answer yet to Q1, Q2, Q3, Q4, Q5" in done.stdout


def test_refuses_the_untouched_skeleton_and_removes_an_old_zip(student):
    _one_task_done(student)
    assert _submission(student).returncode == 0
    assert (student / "submission.zip").exists()
    # back to the skeleton (as shipped): refused, and the zip of the
    # earlier version is gone, so it cannot be uploaded by mistake
    (student / MODULE).write_text(
        (student.parent / "skeleton.py").read_text())
    done = _submission(student)
    assert done.returncode != 0
    assert "NOT built: no task is implemented yet" in done.stderr
    assert "Removed the older submission.zip" in done.stderr
    assert not (student / "submission.zip").exists()


def test_refuses_a_module_that_does_not_import(student):
    (student / MODULE).write_text(example_sources()["syntax_error"])
    done = _submission(student)
    assert done.returncode != 0
    assert "NOT built" in done.stderr and "does not import" in done.stderr
    assert "SyntaxError" in done.stderr
    assert not (student / "submission.zip").exists()


def test_refuses_a_module_that_raises_at_import(student):
    (student / MODULE).write_text("import torch\nraise RuntimeError('x')\n")
    done = _submission(student)
    assert done.returncode != 0 and "RuntimeError" in done.stderr
    assert not (student / "submission.zip").exists()


def test_refuses_an_import_the_grader_does_not_have(student):
    # autograder/imports.toml: scipy is off the list, einops on it.
    reference = REFERENCE.read_text()
    (student / MODULE).write_text("import scipy\n" + reference)
    done = _submission(student)
    assert done.returncode != 0 and "NOT built" in done.stderr
    assert "`scipy` (line 1)" in done.stderr and "`einops`" in done.stderr
    assert not (student / "submission.zip").exists()
    (student / MODULE).write_text("import einops\n" + reference)
    done = _submission(student)
    assert done.returncode == 0, done.stderr
    assert (student / "submission.zip").exists()


def test_refuses_a_module_without_a_graded_name(student):
    """Every class (or function) the rubric grades must be defined: the
    names come from the rubric the release ships."""
    _one_task_done(student)
    name = load_rubric().tasks[-1].cls
    source = (student / MODULE).read_text()
    for kind in ("class", "def"):
        source = source.replace(f"{kind} {name}", f"{kind} Renamed{name}")
    (student / MODULE).write_text(source)
    done = _submission(student)
    assert done.returncode != 0
    assert "does not import" in done.stderr and name in done.stderr
    assert not (student / "submission.zip").exists()


def test_refuses_missing_or_broken_notebook(student):
    notebook = student / NOTEBOOK
    notebook.write_text("{ not json")
    done = _submission(student)
    assert done.returncode != 0 and "not a valid notebook" in done.stderr
    notebook.unlink()
    done = _submission(student)
    assert done.returncode != 0
    assert f"{NOTEBOOK} is missing" in done.stderr
    assert not (student / "submission.zip").exists()


def test_round_trip_through_the_grader(student, tmp_path):
    """The zip of a finished homework grades to full marks, and its
    answers reach the TA pages."""
    shutil.copy2(REFERENCE, student / MODULE)
    _answer(student, "Q2", "Each head scales by sqrt(head_size).")
    done = _submission(student)
    assert done.returncode == 0, done.stderr
    assert "warning: no answer yet to Q1, Q3, Q4, Q5" in done.stdout
    submission = tmp_path / "alice.zip"
    shutil.copy2(student / "submission.zip", submission)
    out = tmp_path / "grades"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "autograder", "grade", "--out",
                    str(out), str(submission)], cwd=ROOT, env=env,
                   capture_output=True, text=True, timeout=600, check=True)
    results = json.loads((submission_dir(out, "alice") / "results.json"
                          ).read_text())
    assert results["score"] == FULL
    page = (out / "answers" / "Q2.md").read_text()
    assert "## alice" in page and "sqrt(head_size)" in page
    assert "_(no answer)_" in (out / "answers" / "Q1.md").read_text()
    # The student sees their own answers in their feedback too.
    feedback = (submission_dir(out, "alice") / "feedback.md").read_text()
    assert "Each head scales by sqrt(head_size)." in feedback
    assert "Each head scales by sqrt(head_size)." in results["output"]


def test_missing_notebook_is_reported_and_costs_nothing(tmp_path):
    out = tmp_path / "grades"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "autograder", "grade", "--out",
                    str(out), str(REFERENCE)], cwd=ROOT, env=env,
                   capture_output=True, text=True, timeout=600, check=True)
    results = json.loads((submission_dir(out, "modeling_attention") /
                          "results.json")
                         .read_text())
    assert results["score"] == FULL
    assert "Could not read your answers: no notebook" in results["output"]
