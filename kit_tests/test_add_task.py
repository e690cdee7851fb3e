"""Adding a task and a question is the walkthrough's files alone
(kit/add_task.py, `make test-add-task`): the list in docs/architecture.md
is the list the proof edits, its edits still apply to the checkout, and
(end to end) the copy stays green after `make generate`."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from kit import add_task
from kit.generate.rubric_change import copy_checkout

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def walkthrough_files() -> set[str]:
    """The files the doc's "Adding a task" numbers (its list items'
    first backquoted path)."""
    section = re.search(r"## Adding a task: a walk-through\n(.*?)\n## ",
                        DOC.read_text(), re.S)
    assert section, "docs/architecture.md has no 'Adding a task' section"
    return set(re.findall(r"^\d+\. `([\w./]+)`", section.group(1), re.M))


def test_the_walkthrough_lists_the_files_the_proof_edits():
    edited = {edit.path for edit in add_task.edits(add_task.plan())}
    listed = walkthrough_files()
    assert listed == edited, (
        f"docs/architecture.md's 'Adding a task' lists {sorted(listed)}, "
        f"kit/add_task.py's EDITS edit {sorted(edited)}: make them agree")


def test_the_edits_apply_to_the_checkout(tmp_path):
    # The anchors are still there once; the new rubric validates with the
    # new task; the new class is in the reference's code.
    chosen = add_task.plan()
    edits = add_task.edits(chosen)
    for path in {edit.path for edit in edits}:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    touched = add_task.apply_all(tmp_path, chosen)
    assert touched == list(dict.fromkeys(e.path for e in edits))
    rubric = load_rubric(tmp_path / "autograder" / "rubric.toml")
    task = next(t for t in rubric.tasks if t.id == chosen.task)
    assert task.cls == chosen.cls
    assert [i.id for i in task.items] == [chosen.item]
    reference = (tmp_path / "solutions" / "transformer_lm"
                 / "modeling_attention.py").read_text()
    compile(reference, "reference", "exec")
    assert f"class {chosen.cls}(nn.Module):" in reference


def test_an_anchor_that_moved_names_the_file_and_the_fix(tmp_path):
    edit = add_task.SourceEdit("notes.md", "new\n", anchor="## Somewhere\n")
    (tmp_path / "notes.md").write_text("## Elsewhere\n")
    with pytest.raises(add_task.AddTaskError, match=r"notes\.md: the anchor "
                       r"'## Somewhere' occurs 0 times .*kit/add_task\.py"):
        edit.apply(tmp_path)


@pytest.mark.e2e
def test_a_task_and_a_question_added_by_the_walkthrough_stay_green():
    # Minutes: make generate, two submissions graded, TESTS in the copy.
    done = subprocess.run([sys.executable, "-m", "kit.add_task"], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "GREEN" in done.stdout


def _walkthrough_copy(into: Path) -> Path:
    """The files the proof reads and edits (the catalogue whole), copied."""
    profile = add_task._profile()
    paths = {edit.path for edit in add_task.edits(add_task.plan())} | {
        add_task._source(profile.questions)}
    for path in paths:
        (into / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, into / path)
    shutil.copytree(profile.catalogue, into / add_task._source(
        profile.catalogue), dirs_exist_ok=True)
    return into


def test_the_proof_never_collides_with_a_course_part_4(tmp_path):
    # A course added Part 4 by the walkthrough (the proof's own edits, as
    # an instructor types them): the proof then takes Part 5, Q7 and
    # names of its own, and both parts' catalogue edits apply once.
    from kit import variants
    root = _walkthrough_copy(tmp_path)
    course = add_task.plan(root)
    assert (course.item, course.question, course.suffix) == ("4.1", "Q6", "")
    add_task.apply_all(root, course)
    proof = add_task.plan(root)
    assert (proof.part, proof.item, proof.question) == (5, "5.1", "Q7")
    assert {proof.task, proof.cls, proof.mistake, *proof.cases}.isdisjoint(
        {course.task, course.cls, course.mistake, *course.cases})
    add_task.apply_all(root, proof)
    rubric = load_rubric(root / "autograder" / "rubric.toml")   # no duplicate
    assert [t.id for t in rubric.tasks][-2:] == [course.task, proof.task]
    reference = (root / add_task._source(add_task._profile().reference)
                 ).read_text()
    compile(reference, "reference", "exec")
    catalogue = root / add_task._source(add_task._profile().catalogue)
    assert variants.catalogue_problems(catalogue, reference) == []
    notebook = (root / add_task._source(add_task._profile().notebook_source)
                ).read_text()
    assert '+++ {"question": "Q6"}' in notebook and \
        '+++ {"question": "Q7"}' in notebook
    cases = (root / add_task._source(add_task._profile().cases)).read_text()
    for name in (*course.cases, *proof.cases):
        assert cases.count(f'Case("{name}"') == 1, name


@pytest.mark.e2e
def test_the_proof_stays_green_where_a_course_added_part_4(tmp_path):
    # The course's Part 4 generated in a copy; the whole proof run there.
    copy = copy_checkout(ROOT, tmp_path)
    add_task.apply_all(copy)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "MAKEFLAGS")}
    subprocess.run(["make", f"PY={sys.executable}", "generate"], cwd=copy,
                   env=env, check=True, capture_output=True, timeout=1800)
    done = subprocess.run([sys.executable, "-m", "kit.add_task"], cwd=copy,
                          env={**env, "PYTHONPATH": str(copy)},
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "GREEN: task 5.1 and question Q7" in done.stdout
