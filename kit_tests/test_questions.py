"""The notebook's questions are data: taken from the notebook source by the
build (kit/generate/notebook.py) into autograder/questions.toml, which the
grader's answer extractor reads. A question added to the source alone is
collected: its answer reaches the feedback, answers.json and the TAs' page."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import homework
from autograder.report.layout import submission_dir
from autograder.submission import answers
from kit.generate import notebook
from kit.generate.rubric_change import copy_checkout

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = homework.staff().reference
# The id after the last of the notebook's questions (Q6 after Q1-Q5).
NEW = f"Q{max(int(q[1:]) for q in answers.questions()) + 1}"
# A question as an instructor adds it to assignment/attention.md: its
# prompt, then its sample answer.
NEW_QUESTION = f"""
+++ {{"question": "{NEW}"}}

**{NEW}.** Why does the fused module need one `out_proj` and the stacked
heads none?

+++ {{"sample": "{NEW}"}}

**Answer {NEW}:**

The fused heads are concatenated; out_proj mixes them.
"""
ANSWER = "The concatenation is already the output; mixing is extra."


def test_the_grader_asks_what_the_source_asks():
    built = notebook.questions(notebook.build())
    assert built and answers.questions() == built
    assert answers.QUESTIONS == built   # the old name reads the same data


@pytest.mark.parametrize("text", [
    "questions = [",                      # not TOML
    'questions = []',                     # none
    'questions = ["Q1", "Q1"]',           # repeated
    'questions = ["Q1", "Question 2"]',   # not an id the prefix can name
    'asked = ["Q1"]',                     # no `questions`
])
def test_a_broken_questions_file_names_itself_and_the_fix(tmp_path, text):
    path = tmp_path / "questions.toml"
    path.write_text(text)
    with pytest.raises(answers.QuestionsError) as error:
        answers.load_questions(path)
    assert str(path) in str(error.value)
    assert "make generate" in str(error.value)


def test_a_question_id_the_grader_cannot_read_is_refused(tmp_path):
    source = tmp_path / homework.staff().notebook_source.name
    source.write_text(homework.staff().notebook_source.read_text()
                      + NEW_QUESTION.replace(NEW, NEW + "b"))
    with pytest.raises(notebook.MasterError,
                       match=rf"{re.escape(source.name)}:\d+: "
                       rf"question id '{NEW}b'"):
        notebook.build(source)


def _sixth_question_copy(tmp_path: Path) -> Path:
    """A copy of the checkout whose notebook source has a sixth question,
    rebuilt as `make build-notebook` does."""
    copy = copy_checkout(ROOT, tmp_path)
    source = homework.load(copy, staff=True).notebook_source
    source.write_text(source.read_text() + NEW_QUESTION)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run([sys.executable, "-m", "kit.generate",
                           "build-notebook"], cwd=copy, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return copy


@pytest.mark.e2e
def test_a_sixth_question_is_collected(tmp_path):
    copy = _sixth_question_copy(tmp_path)
    profile = homework.load(copy, staff=True)
    asked = answers.load_questions(profile.questions)
    assert asked == (*answers.questions(), NEW)
    # A student's submission: the reference and the built notebook, with
    # only the new question answered.
    nb = nbformat.read(str(profile.notebook), 4)
    (cell,) = [c for c in nb.cells
               if c.metadata.get("kit") == {"question": NEW}]
    cell.source = f"**Answer {NEW}:**\n\n{ANSWER}"
    student = tmp_path / "subs" / "alice"
    student.mkdir(parents=True)
    (student / profile.module_name).write_text(REFERENCE.read_text())
    nbformat.write(nb, str(student / profile.notebook.name))
    out = tmp_path / "grades"
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--public-only",
         "--out", str(out), str(student)],
        cwd=copy, env={**os.environ, "PYTHONPATH": str(copy)},
        capture_output=True, text=True, timeout=300)
    folder = submission_dir(out, "alice")
    assert (folder / "answers.json").is_file(), done.stdout + done.stderr
    found = json.loads((folder / "answers.json").read_text())
    assert list(found) == list(asked) and found[NEW] == ANSWER
    page = (out / "answers" / f"{NEW}.md").read_text()
    assert "1 of 1 submissions answered" in page and ANSWER in page
    assert ANSWER in (folder / "feedback.md").read_text()


def test_a_questions_points_reach_otter_and_questions_toml(tmp_path):
    # Points live where a question is declared: its cell in the source.
    from autograder.term.course import question_points
    source = tmp_path / homework.staff().notebook_source.name
    master = homework.staff().notebook_source
    (tmp_path / "figures").symlink_to(master.parent / "figures")
    source.write_text(master.read_text() + NEW_QUESTION.replace(
        f'{{"question": "{NEW}"}}', f'{{"question": "{NEW}", "points": 2}}'))
    built = notebook.build(source)
    assert any(c.source.startswith("# BEGIN QUESTION") and
               f"name: {NEW.lower()}\nmanual: true\npoints: 2" in c.source
               for c in built.cells)
    assert not any("points" in c.metadata for c in built.cells)
    toml = tmp_path / "questions.toml"
    toml.write_text(notebook.render_questions(built))
    # the master's own questions keep whatever points it declares (a
    # course that scores them has given them some)
    declared = tmp_path / "declared.toml"
    declared.write_text(notebook.render_questions(notebook.build()))
    assert question_points(toml) == {**question_points(declared), NEW: 2.0}
    # no points anywhere: the generated file has none
    bare = tmp_path / "bare.md"
    bare.write_text(re.sub(r', "points": [^,}]+', "", master.read_text()))
    assert "points" not in notebook.render_questions(notebook.build(bare))
    bad = tmp_path / "bad.md"
    bad.write_text(source.read_text().replace('"points": 2', '"points": -1'))
    with pytest.raises(notebook.MasterError, match="must be a number"):
        notebook.build(bad)
