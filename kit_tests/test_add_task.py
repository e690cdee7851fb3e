"""Adding a task and a question is the walkthrough's files alone
(kit/add_task.py, `make test-add-task`): the list in docs/architecture.md
is the list the proof edits, its edits still apply to the checkout, and
(end to end) the copy stays green after `make generate`."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.rubric import load_rubric
from kit import add_task

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
    edited = {edit.path for edit in add_task.EDITS}
    listed = walkthrough_files()
    assert listed == edited, (
        f"docs/architecture.md's 'Adding a task' lists {sorted(listed)}, "
        f"kit/add_task.py's EDITS edit {sorted(edited)}: make them agree")


def test_the_edits_apply_to_the_checkout(tmp_path):
    # The anchors are still there once; the new rubric validates with the
    # new task; the new class is in the reference's code.
    for path in {edit.path for edit in add_task.EDITS}:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    touched = add_task.apply_all(tmp_path)
    assert touched == list(dict.fromkeys(e.path for e in add_task.EDITS))
    rubric = load_rubric(tmp_path / "autograder" / "rubric.toml")
    task = next(t for t in rubric.tasks if t.id == add_task.TASK)
    assert task.cls == add_task.CLASS
    assert [i.id for i in task.items] == [add_task.ITEM]
    reference = (tmp_path / "solutions" / "transformer_lm"
                 / "modeling_attention.py").read_text()
    compile(reference, "reference", "exec")
    assert f"class {add_task.CLASS}(nn.Module):" in reference


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
