"""One checker: for every submission of the kit's corpus, the four places a
verdict comes from agree item by item on the public cases.

- the grader: ``python -m autograder grade --public-only`` (one run over the
  whole corpus, sandboxed), read from each results.json;
- ``make check``: ``python -m autograder check FILE``, read from its preview;
- the student tests: ``pytest tests`` with ATTENTION_IMPL=FILE, run
  in-process, one test per rubric item;
- the notebook: ``transformer_lm.checks.run_check(task, FILE)``, the
  function its check cells show, one call per notebook task
  (its per-item lines; the task passes only if all its items do).

The corpus: every entry of the variant catalogue (kit/variants/), the
common mistakes included, but those marked ``in_process = false``: the
student's checkers run the student's code in the student's own process,
with no time or memory limit and no wall against exiting, writing files
or patching torch, which only the sandboxed grader must survive
(test_grading_corpus.py grades them). Items
and cases come from the rubric and the manifest, so new public cases are
covered as they come.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import torch

from autograder.report.layout import submission_dir
from autograder import cli
from autograder.local import SCOPE, notebook_task, task_points, \
    value_rubric
from autograder.rubric import load_rubric
from kit import variants
from autograder.notebook_checks import run_check

ROOT = Path(__file__).resolve().parents[1]
ITEMS = [i.id for t in value_rubric(load_rubric()).tasks for i in t.items]
VERDICT = re.compile(r"^\s*\[(ok  |FAIL)\] (\S+) ", re.MULTILINE)
MARK = re.compile(r"^([✔✘]) (\S+) \(", re.MULTILINE)
VARIANTS = variants.load_all()


def corpus() -> dict[str, str]:
    """Submission name (``group-name``) -> source, every entry of the
    catalogue that is safe to run in this process."""
    return {key.replace("/", "-"): v.source() for key, v in VARIANTS.items()
            if v.fields.get("in_process", True)}


CORPUS = corpus()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The corpus written as ``<name>.py`` files."""
    folder = tmp_path_factory.mktemp("corpus")
    for name, source in CORPUS.items():
        (folder / f"{name}.py").write_text(source)
    return folder


@pytest.fixture(scope="module")
def graded(files: Path, tmp_path_factory) -> Path:
    """``python -m autograder grade --public-only`` over the corpus."""
    out = tmp_path_factory.mktemp("grades")
    threads = torch.get_num_threads()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["grade", "--public-only", "--jobs", "2",
                               "--out", str(out),
                               *map(str, sorted(files.glob("*.py")))])
    finally:
        torch.set_num_threads(threads)   # cli.main sets one thread
    assert status == 0
    return out


def grader_verdicts(out: Path, name: str) -> dict[str, bool]:
    """Item -> passed, from the grader's results.json."""
    data = json.loads((submission_dir(out, name) / "results.json").read_text())
    assert not data["extra_data"]["internal_error"], data["output"]
    return {t["number"]: t["status"] == "passed" for t in data["tests"]
            if t.get("number") in ITEMS}


def make_check_verdicts(path: Path) -> tuple[dict[str, bool], str]:
    """Item -> passed, from ``python -m autograder check FILE``'s
    preview (its deductions and bonus are not items)."""
    threads = torch.get_num_threads()
    shown = io.StringIO()
    try:
        with contextlib.redirect_stdout(shown):
            assert cli.main(["check", str(path)]) == 0
    finally:
        torch.set_num_threads(threads)
    text = shown.getvalue()
    return ({item: mark == "ok  " for mark, item in VERDICT.findall(text)
             if item in ITEMS}, text)


class _Reports:
    """A pytest plugin that keeps each test's verdict by item id."""

    def __init__(self) -> None:
        self.verdicts: dict[str, bool] = {}
        self.header: list[str] = []

    def pytest_runtest_logreport(self, report) -> None:
        item = report.nodeid.rsplit("[", 1)[-1].rstrip("]")
        if report.when == "call" or report.failed:
            self.verdicts[item] = self.verdicts.get(item, True) and \
                report.passed

    def pytest_report_header(self, config) -> list[str]:
        return []


def student_test_verdicts(path: Path,
                          monkeypatch) -> dict[str, bool]:
    """Item -> passed, from ``pytest tests`` run in this process."""
    monkeypatch.setenv("ATTENTION_IMPL", str(path))
    reports = _Reports()
    with contextlib.redirect_stdout(io.StringIO()):
        status = pytest.main([str(ROOT / "tests"), "-q", "-p",
                              "no:cacheprovider", "--rootdir", str(ROOT)],
                             plugins=[reports])
    assert status in (0, 1), f"pytest tests exited {status} on {path}"
    return reports.verdicts


def notebook_verdicts(path: Path) -> dict[str, bool]:
    """Item -> passed, from the notebook's check function, one call per
    task; a task's verdict (passes or raises) must agree with its items."""
    verdicts: dict[str, bool] = {}
    for task in task_points(load_rubric()):
        shown = io.StringIO()
        try:
            with contextlib.redirect_stdout(shown):
                run_check(task, path)
            text, passed = shown.getvalue(), True
        except AssertionError as failure:
            text, passed = str(failure), False
        assert SCOPE in text
        marks = {item: mark == "✔" for mark, item in MARK.findall(text)}
        assert marks and all(notebook_task(i) == task for i in marks)
        assert passed == all(marks.values()), text
        verdicts.update(marks)
    return verdicts


def test_corpus_is_the_catalogue():
    unsafe = {k.replace("/", "-") for k, v in VARIANTS.items()
              if not v.fields.get("in_process", True)}
    assert set(CORPUS) | unsafe == {k.replace("/", "-") for k in VARIANTS}
    assert {"hostile-prints", "hostile-exit_at_import",
            "styles-reference", "examples-no_scale"} <= set(CORPUS)


@pytest.mark.parametrize("name", list(CORPUS))
def test_every_checker_gives_the_graders_verdict(name, files, graded,
                                                 monkeypatch):
    path = files / f"{name}.py"
    grader = grader_verdicts(graded, name)
    assert list(grader) == ITEMS
    check, text = make_check_verdicts(path)
    student = student_test_verdicts(path, monkeypatch)
    notebook = notebook_verdicts(path)
    disagree = {item: {"grader": grader[item],
                       "make check": check.get(item),
                       "pytest tests": student.get(item),
                       "notebook": notebook.get(item)}
                for item in ITEMS
                if not grader[item] == check.get(item) == student.get(item)
                == notebook.get(item)}
    assert disagree == {}, text


def test_every_item_passes_and_fails_somewhere(graded):
    # Agreement would prove little if an item passed (or failed) for every
    # submission of the corpus.
    passed = {item: set() for item in ITEMS}
    for name in CORPUS:
        for item, ok in grader_verdicts(graded, name).items():
            passed[item].add(ok)
    assert {item: seen for item, seen in passed.items()
            if seen != {True, False}} == {}
