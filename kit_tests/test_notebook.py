"""The assignment notebook: build, otter assign, and real-kernel runs.

The notebook runs in a real ``python3`` Jupyter kernel (nbclient) inside a
temporary workspace holding ``transformer_lm/`` (the repo's package with
``modeling_attention.py`` swapped for the reference or the skeleton) and
the public test values, so nothing in the checkout is touched.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from autograder import homework
from autograder.local import TASK_SCOPE, task_points
from autograder.rubric import load_rubric
from autograder.submission.answers import questions
from kit.generate import notebook

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
SKELETON = ROOT / "transformer_lm" / "modeling_attention.py"
TASKS = tuple(task_points(load_rubric()))
QUESTIONS = questions()   # what the grader collects (questions.toml)
START, END = "# YOUR CODE STARTS HERE", "# YOUR CODE ENDS HERE"


# -- helpers ---------------------------------------------------------------

def _derived_skeleton() -> str:
    """The reference with every student region replaced by a raise."""
    lines, out, task, skipping = REFERENCE.read_text().splitlines(), [], "", 0
    for line in lines:
        header = re.search(r"#\s*Task (\d\.\d)", line)
        task = header.group(1) if header else task
        if line.strip() == START:
            indent = line[:len(line) - len(line.lstrip())]
            out += [line, f'{indent}raise NotImplementedError('
                          f'"Task {task} not implemented yet")']
            skipping = 1
        elif line.strip() == END:
            out.append(line)
            skipping = 0
        elif not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def _skeleton_source() -> str:
    """The committed student skeleton, or one derived from the reference
    while the skeleton generator has not produced it yet."""
    if SKELETON.exists() and "NotImplementedError" in SKELETON.read_text():
        return SKELETON.read_text()
    return _derived_skeleton()


def _workspace(directory: Path, implementation: str) -> Path:
    """``transformer_lm/`` with ``implementation``, the public values, the
    profile and the checker ``autograder/`` (as the release ships them)."""
    shutil.copytree(ROOT / "autograder", directory / "autograder",
                    ignore=shutil.ignore_patterns("__pycache__",
                                                  "gradescope*"))
    shutil.copytree(ROOT / "kinds", directory / "kinds",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "homework.toml", directory)
    package = directory / "transformer_lm"
    package.mkdir(parents=True)
    for source in (ROOT / "transformer_lm").glob("*.py"):
        shutil.copy(source, package)
    (package / "modeling_attention.py").write_text(implementation)
    values = directory / "test_values"
    values.mkdir()
    for name in ("manifest.json", "public.safetensors"):
        shutil.copy(ROOT / "test_values" / name, values)
    return directory


def _execute(path: Path, monkeypatch) -> nbformat.NotebookNode:
    """Run the notebook at ``path`` top to bottom in its own folder."""
    monkeypatch.setenv("PYTHONPATH", str(path.parent))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(str(path), as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}
                   ).execute()
    return nb


def _output_text(cell: nbformat.NotebookNode) -> str:
    """Everything a code cell showed, as text."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        data = output.get("data", {})
        parts += [data.get("text/plain", ""), data.get("text/html", "")]
        if output.get("output_type") == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
    return "\n".join(parts)


def _errors(nb: nbformat.NotebookNode) -> list[str]:
    return [_output_text(c) for c in nb.cells if c.cell_type == "code"
            and any(o.get("output_type") == "error" for o in c.outputs)]


def _cell(nb: nbformat.NotebookNode, cell_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.get("id") == cell_id)


def _check_id(task_id: str) -> str:
    return "check-task-" + task_id.replace(".", "-")


def _test_id(task_id: str) -> str:
    return "test-task-" + task_id.replace(".", "-")


def _assert_one_clean_verdict(cell: nbformat.NotebookNode,
                              task_id: str) -> str:
    """The check cell showed one verdict, as text and as a word-wrapping
    block, with no frame, traceback or second pass line; its text."""
    assert [o["output_type"] for o in cell.outputs] == ["execute_result"], \
        cell.outputs
    data = cell.outputs[0]["data"]
    text = data["text/plain"]
    assert text.count(f"Task {task_id}:") == 1, text
    assert TASK_SCOPE in text, text
    for frame in ("Test case failed", "Error at line", "Traceback",
                  "AssertionError", "passed!", "results:"):
        assert frame not in text, text
    assert all(len(line) <= 78 for line in text.splitlines()), text
    assert "word-break: normal" in data["text/html"]
    return text


def _plot_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"
            and "if_implemented(" in c.source and "def " not in c.source]


def _assert_reminders_say_what_they_show(nb) -> None:
    """On the skeleton, every plot or printout cell names the task to
    finish, and "this plot" only where the cell plots (a table is not a
    plot)."""
    for cell in _plot_cells(nb):
        shown = _output_text(cell)
        what = "this plot" if "plot_" in cell.source else "(?!this plot)"
        assert re.search(rf"Finish Task [23]\.\d to see {what}", shown), \
            (cell.source, shown)
        assert not any("image/png" in o.get("data", {})
                       for o in cell.outputs)


@pytest.fixture(scope="module")
def assigned(tmp_path_factory) -> Path:
    """``otter assign`` of the committed master into a temporary folder."""
    out = tmp_path_factory.mktemp("dist") / "attention"
    result = subprocess.run(
        [sys.executable, "-m", "otter", "assign",
         str(homework.staff().notebook), str(out)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


# -- the built notebook ----------------------------------------------------

def test_committed_notebook_matches_the_builder():
    assert homework.staff().notebook.read_text() == notebook.render(), (
        "assignment/attention.ipynb is not what assignment/attention.md "
        "builds: run `make build-notebook`")


def test_stale_then_written_then_in_step(tmp_path, capsys):
    out = {"out": tmp_path / "attention.ipynb",
           "questions_out": tmp_path / "questions.toml"}
    assert "attention.ipynb is stale" in notebook.stale(**out)
    assert notebook.write(**out) == 0
    assert notebook.stale(**out) is None
    assert f"wrote {out['out']}" in capsys.readouterr().out
    out["questions_out"].write_text('questions = ["Q1"]\n')
    assert "questions.toml is stale" in notebook.stale(**out)


def test_master_structure():
    nb = notebook.build()
    nbformat.validate(nb)
    config = nb.cells[0]
    assert config.cell_type == "raw"
    assert config.source.startswith("# ASSIGNMENT CONFIG")
    settings = yaml.safe_load(config.source)
    assert "../transformer_lm" in settings["files"]
    assert settings["tests"] == {"files": True, "ok_format": False}
    questions = [yaml.safe_load(c.source) for c in nb.cells
                 if c.cell_type == "raw"
                 and c.source.startswith("# BEGIN QUESTION")]
    points = {q["name"]: q["points"] for q in questions}
    # A task's points are its rubric items' (2.3 = 2.3a + 2.3b).
    items = {i.id: i.points for t in load_rubric().tasks for i in t.items}
    assert points == {
        **{"task_" + t.replace(".", "_"): sum(
            p for i, p in items.items() if i.rstrip("abcde") == t)
           for t in TASKS},
        **{q.lower(): 0 for q in QUESTIONS}}
    assert all(q.get("manual") for q in questions if q["name"][0] == "q")
    assert all(q["check_cell"] is False for q in questions
               if q["name"].startswith("task_"))
    for task_id in TASKS:
        assert _cell(nb, _check_id(task_id)).source == f'check("{task_id}")'
        assert f'run_check("{task_id}")' in _cell(nb, _test_id(task_id)).source
    for qid in QUESTIONS:
        for prefix, meta in (("answer", {"question": qid}),
                             ("sample", {"question": qid, "sample": True})):
            cell = _cell(nb, f"{prefix}-{qid.lower()}")
            assert cell.cell_type == "markdown"
            assert cell.metadata["kit"] == meta
            assert cell.source.splitlines()[0] == f"**Answer {qid}:**"


def test_otter_tests_say_what_they_check():
    nb = notebook.build()
    for task_id in TASKS:
        source = _cell(nb, _test_id(task_id)).source
        config = yaml.safe_load(source.split('"""')[1].split("\n", 1)[1])
        assert TASK_SCOPE in config["success_message"]
        assert TASK_SCOPE in config["failure_message"]


def test_part3_walks_through_the_book():
    nb = notebook.build()
    text = "\n".join(c.source for c in nb.cells)
    order = ["Your journey starts with one step", "### Task 3.1",
             "### Task 3.2", "### Task 3.3", "### Task 3.4",
             "## Is the fused form faster?"]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)
    # The book's printed values are quoted for the student to compare.
    for value in ("-0.4519,  0.2216", "0.2575, 0.4028", "2\\,362\\,368"):
        assert value in text, value
    # The benchmark is shown, not run: no cell imports it.
    assert "bench_attention" not in "\n".join(
        c.source for c in nb.cells if c.cell_type == "code")


def test_benchmark_chart_is_embedded_with_an_honest_reading():
    nb = notebook.build()
    (cell,) = [c for c in nb.cells
               if c.source.startswith("## Is the fused form faster?")]
    png = cell.attachments["bench_attention.png"]["image/png"]
    chart = homework.staff().notebook_source.parent / "figures" / \
        "bench_attention.png"
    assert base64.b64decode(png) == chart.read_bytes()
    assert "(attachment:bench_attention.png)" in cell.source
    text = " ".join(cell.source.split())
    for claim in ("**not** faster", "[8, 12, 1024, 1024]", "three times",
                  "memory traffic", "On a GPU"):
        assert claim in text, claim


# -- otter assign ----------------------------------------------------------

def test_otter_assign_student_notebook(assigned):
    from autograder.submission.answers import collect_answers

    student = assigned / "student" / "attention.ipynb"
    nb = nbformat.read(str(student), as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    # no otter needed: no call of otter's grader object
    assert not re.search(r"(?<![\w.])grader\.", code) and "otter" not in code
    for task_id in TASKS:
        name = "task_" + task_id.replace(".", "_")
        (cell,) = [c for c in nb.cells if c.source == f'check("{task_id}")']
        assert cell.metadata.editable is False
        assert (assigned / "student" / "tests" / f"{name}.py").is_file()
        test_file = (assigned / "student" / "tests" / f"{name}.py")
        assert f"run_check('{task_id}')" in test_file.read_text()
    for marker in ("# BEGIN SOLUTION", "# END SOLUTION", "# BEGIN QUESTION",
                   "# BEGIN TESTS", "# BEGIN IGNORE", "def report",
                   "report(test_"):
        assert marker not in text
    master = notebook.build()
    for qid in QUESTIONS:
        sample = _cell(master, f"sample-{qid.lower()}").source
        assert sample.splitlines()[2] not in text
        answers = [c for c in nb.cells
                   if c.metadata.get("kit", {}).get("question") == qid]
        assert len(answers) == 1 and "sample" not in answers[0].metadata.kit
        assert answers[0].source.startswith(f"**Answer {qid}:**")
    assert collect_answers(student) == {q: "" for q in QUESTIONS}
    chart = [c for c in nb.cells if "attachment:bench_attention.png"
             in c.source]
    assert len(chart) == 1 and "bench_attention.png" in chart[0].attachments
    assert (assigned / "student" / "transformer_lm").is_dir()
    # the text source holds the sample answers: otter must not copy it
    assert not list(assigned.rglob(homework.staff().notebook_source.name))
    assert not (assigned / "student" / "test_values" /
                "hidden.safetensors").exists()


# -- real-kernel runs ------------------------------------------------------

def test_master_runs_against_the_reference(tmp_path, monkeypatch):
    work = _workspace(tmp_path, REFERENCE.read_text())
    shutil.copy(homework.staff().notebook, work)
    nb = _execute(work / homework.staff().notebook.name, monkeypatch)
    assert _errors(nb) == []
    for task_id in TASKS:
        shown = _assert_one_clean_verdict(_cell(nb, _check_id(task_id)),
                                          task_id)
        assert f"Task {task_id}: passed" in shown and "✘" not in shown
    for cell in _plot_cells(nb):
        assert any("image/png" in o.get("data", {}) for o in cell.outputs)
        assert "Finish Task" not in _output_text(cell)
    shown = "\n".join(_output_text(c) for c in nb.cells
                      if c.cell_type == "code")
    for printed in ("-0.4519,  0.2216", "-0.5299, -0.1081",
                    "torch.Size([2, 6, 4])", "2,362,368 parameters, 12 heads "
                    "of 64"):
        assert printed in shown, printed
    difference = re.search(r"largest difference: (\S+)", shown)
    assert difference and float(difference.group(1)) < 1e-6


def test_master_runs_against_the_skeleton(tmp_path, monkeypatch):
    work = _workspace(tmp_path, _skeleton_source())
    shutil.copy(homework.staff().notebook, work)
    nb = _execute(work / homework.staff().notebook.name, monkeypatch)
    assert _errors(nb) == []
    for task_id in TASKS:
        shown = _assert_one_clean_verdict(_cell(nb, _check_id(task_id)),
                                          task_id)
        assert "failed on the public cases" in shown, shown
        assert "not implemented yet" in shown, shown
    _assert_reminders_say_what_they_show(nb)


def test_student_notebook_runs_against_the_skeleton(assigned, tmp_path,
                                                    monkeypatch):
    work = _workspace(tmp_path, _skeleton_source())
    shutil.copy(assigned / "student" / "attention.ipynb", work)
    shutil.copytree(assigned / "student" / "tests", work / "tests")
    nb = _execute(work / "attention.ipynb", monkeypatch)
    assert _errors(nb) == []
    checks = [c for c in nb.cells if c.source.startswith("check(")]
    assert len(checks) == len(TASKS)
    for cell, task_id in zip(checks, TASKS):
        shown = _assert_one_clean_verdict(cell, task_id)
        assert "not implemented yet" in shown
    _assert_reminders_say_what_they_show(nb)


def test_a_failed_setup_stops_run_all_at_one_message(tmp_path, monkeypatch):
    # The notebook alone, no homework folder around it: the first code
    # cell says what to do and "Run All" stops there, no NameErrors after.
    shutil.copy(homework.staff().notebook, tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    nb = nbformat.read(str(tmp_path / homework.staff().notebook.name),
                       as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError):
        client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    (shown,) = code[0].outputs
    assert shown["ename"] == "SetupError"
    assert shown["traceback"][0].startswith("SETUP FAILED: no homework")
    assert not any("Traceback" in line or "File " in line
                   for line in shown["traceback"])
    assert all(not c.get("outputs") for c in code[1:])


# -- a module that does not import ----------------------------------------

BROKEN = ("return probs @ v  # [bs, seq, hidden]",
          "return probs @ v  # [bs, seq, hidden]\n    x = (")


def _broken_source() -> str:
    source = REFERENCE.read_text()
    assert source.count(BROKEN[0]) == 1
    return source.replace(*BROKEN)


def _client(path: Path, monkeypatch) -> tuple[NotebookClient,
                                              nbformat.NotebookNode]:
    monkeypatch.setenv("PYTHONPATH", str(path.parent))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(str(path), as_version=4)
    return NotebookClient(nb, timeout=120, kernel_name="python3",
                          allow_errors=True, resources={
                              "metadata": {"path": str(path.parent)}}), nb


def _code(nb, needle: str) -> tuple[int, nbformat.NotebookNode]:
    return next((i, c) for i, c in enumerate(nb.cells)
                if c.cell_type == "code" and needle in c.source)


def _save(path: Path, text: str) -> None:
    """Write ``text`` as an editor saves it, a second later than before
    (a change the re-import sees whatever the clock's resolution)."""
    before = path.stat().st_mtime
    path.write_text(text)
    os.utime(path, (before + 1, before + 1))


def test_a_broken_module_after_a_restart_is_one_error_and_check_says_fix(
        tmp_path, monkeypatch):
    work = _workspace(tmp_path, _broken_source())
    shutil.copy(homework.staff().notebook, work)
    client, nb = _client(work / homework.staff().notebook.name, monkeypatch)
    setup, _ = _code(nb, "find_homework")
    index, imports = _code(nb, "import_module()")
    assert imports.source.index("check") < \
        imports.source.index("import_module()")
    with client.setup_kernel():
        client.execute_cell(nb.cells[setup], setup)
        client.execute_cell(imports, index)
        (shown,) = imports.outputs
        assert shown["ename"] == "ModuleImportError", shown
        text = "\n".join(shown["traceback"])
        assert "does not import: SyntaxError" in text
        assert "line 60: x = (" in " ".join(text.split())
        assert "Traceback" not in text and "File " not in text
        for task_id in ("1.2", "3.4"):
            at = next(i for i, c in enumerate(nb.cells)
                      if c.get("id") == _check_id(task_id))
            client.execute_cell(nb.cells[at], at)
            said = _assert_one_clean_verdict(nb.cells[at], task_id)
            assert said.startswith(f"Task {task_id}: fix the module first")
            assert said.count("was never closed") == 1


def test_a_module_broken_in_a_live_kernel_is_said_once(
        tmp_path, monkeypatch):
    work = _workspace(tmp_path, REFERENCE.read_text())
    shutil.copy(homework.staff().notebook, work)
    module = work / "transformer_lm" / "modeling_attention.py"
    client, nb = _client(work / homework.staff().notebook.name, monkeypatch)
    first = [_code(nb, "find_homework"), _code(nb, "import_module()"),
             _code(nb, "def if_implemented")]
    check_at = next(i for i, c in enumerate(nb.cells)
                    if c.get("id") == _check_id("1.2"))
    size_at, size = _code(nb, "show_gpt2_size, ")
    with client.setup_kernel():
        for index, cell in first:
            client.execute_cell(cell, index)
        assert _errors(nb) == []
        _save(module, _broken_source())
        client.execute_cell(nb.cells[check_at], check_at)
        said = _assert_one_clean_verdict(nb.cells[check_at], "1.2")
        assert said.startswith("Task 1.2: fix the module first")
        assert said.count("was never closed") == 1   # no reload traceback
        client.execute_cell(size, size_at)   # uses the last good version
        shown = _output_text(size)
        assert shown.count("does not import") == 1, shown
        assert "Traceback" not in shown and "2,362,368 parameters" in shown
        _save(module, REFERENCE.read_text())   # fixed: passes, no note
        client.execute_cell(nb.cells[check_at], check_at)
        said = _assert_one_clean_verdict(nb.cells[check_at], "1.2")
        assert said.startswith("Task 1.2: passed")
        client.execute_cell(size, size_at)
        assert "does not import" not in _output_text(size)
