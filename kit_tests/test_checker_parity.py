"""One checker: for every submission of the kit's corpus, the four places a
verdict comes from agree item by item on the public cases.

- the grader: ``python -m autograder grade --public-only`` (one run over the
  whole corpus, sandboxed), read from each results.json;
- ``make check``: ``python -m autograder check FILE``, read from its preview;
- the student tests: ``pytest tests`` with HOMEWORK_IMPL=FILE, run
  in-process, one test per rubric item;
- the notebook: ``autograder.notebook_checks.run_check(task, FILE)``, the
  function its check cells show, one call per notebook task
  (its per-item lines; the task passes only if all its items do and no
  deduction is taken).

The grader, ``make check`` and the notebook also agree on every deduction
and bonus: the points each takes or adds (``pytest tests`` runs items
only).

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
import multiprocessing
import re
from pathlib import Path

import pytest
import torch

from autograder.report.layout import submission_dir
from autograder import cli
from autograder.local import TASK_SCOPE, notebook_task, task_points, \
    value_rubric
from autograder.rubric import load_rubric
from kit import variants
from autograder.notebook_checks import run_check

ROOT = Path(__file__).resolve().parents[1]
ITEMS = [i.id for t in value_rubric(load_rubric()).tasks for i in t.items]
EXTRAS = [c.id for t in load_rubric().tasks
          for c in (*t.deductions, *t.bonuses)]
VERDICT = re.compile(r"^\s*\[(ok  |FAIL)\] (\S+) ", re.MULTILINE)
CHECK_POINTS = re.compile(r"^\s*\[(?:ok  |FAIL)\] (\S+) .*\((-?[\d.]+)\)$",
                          re.MULTILINE)
MARK = re.compile(r"^([✔✘]) (\S+) \(([^)]*)\)", re.MULTILINE)
# A deduction or bonus line's points: "(deduction: -1 point)", "(bonus: +1
# point)"; not taken or not earned: 0.
TAKEN = re.compile(r"^(?:deduction|bonus): ([-+][\d.]+) points?$")
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


def _results(out: Path, name: str) -> list[dict]:
    data = json.loads((submission_dir(out, name) / "results.json").read_text())
    assert not data["extra_data"]["internal_error"], data["output"]
    return data["tests"]


def grader_verdicts(out: Path, name: str) -> dict[str, bool]:
    """Item -> passed, from the grader's results.json."""
    return {t["number"]: t["status"] == "passed"
            for t in _results(out, name) if t.get("number") in ITEMS}


def grader_extras(out: Path, name: str) -> dict[str, float]:
    """Deduction or bonus -> the points it takes (negative) or adds."""
    return {t["number"]: t["score"] for t in _results(out, name)
            if t.get("number") in EXTRAS}


def make_check_verdicts(path: Path) -> tuple[dict[str, bool], str]:
    """Item -> passed, from ``python -m autograder check FILE``'s
    preview (its deductions and bonus are not items), and its text."""
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


def in_fork(function, *args):
    """``function(*args)`` in a forked child of this process, its result
    or its exception handed back. The student's checkers run the student's
    code in-process (as in the student's kernel); whatever that code
    changes in the interpreter (builtins, the recorder's module) must die
    with the child, not reach the next entry's sandbox, which forks from
    this process."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(function, args)


def student_test_verdicts(path: Path) -> dict[str, bool]:
    """Item -> passed, from ``pytest tests`` run in this process, on the
    module ``$HOMEWORK_IMPL`` names."""
    reports = _Reports()
    with contextlib.redirect_stdout(io.StringIO()):
        status = pytest.main([str(ROOT / "tests"), "-q", "-p",
                              "no:cacheprovider", "--rootdir", str(ROOT)],
                             plugins=[reports])
    assert status in (0, 1), f"pytest tests exited {status} on {path}"
    return reports.verdicts


def make_check_extras(text: str) -> dict[str, float]:
    """Deduction or bonus -> its points, from ``make check``'s preview."""
    return {check: float(points) for check, points in
            CHECK_POINTS.findall(text) if check in EXTRAS}


def notebook_verdicts(path: Path
                      ) -> tuple[dict[str, bool], dict[str, float]]:
    """Item -> passed and deduction or bonus -> points, from the
    notebook's check function, one call per task; a task passes (rather
    than raises) exactly when its items pass and no deduction is taken,
    and every cell of a class shows the same deductions."""
    verdicts: dict[str, bool] = {}
    extras: dict[str, float] = {}
    for task in task_points(load_rubric()):
        shown = io.StringIO()
        try:
            with contextlib.redirect_stdout(shown):
                run_check(task, path)
            text, passed = shown.getvalue(), True
        except AssertionError as failure:
            text, passed = str(failure), False
        assert TASK_SCOPE in " ".join(text.split())
        if "fix the module first" in text:   # said once, no item lines
            assert not passed and not MARK.findall(text), text
            verdicts.update({i: False for i in ITEMS
                             if notebook_task(i) == task})
            continue
        marks = {check: (mark == "✔", points)
                 for mark, check, points in MARK.findall(text)}
        items = {c: ok for c, (ok, _) in marks.items() if c in ITEMS}
        taken = {c: float(m.group(1)) if (m := TAKEN.match(points))
                 else 0.0 for c, (_, points) in marks.items()
                 if c not in ITEMS}
        assert items and all(notebook_task(i) == task for i in items)
        assert set(taken) <= set(EXTRAS), taken
        deducted = any(v < 0 for v in taken.values())
        assert passed == (all(items.values()) and not deducted), text
        for check, points in taken.items():
            assert extras.setdefault(check, points) == points, text
        verdicts.update(items)
    return verdicts, extras


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
    monkeypatch.setenv("HOMEWORK_IMPL", str(path))
    student = in_fork(student_test_verdicts, path)
    notebook, notebook_extras = in_fork(notebook_verdicts, path)
    disagree = {item: {"grader": grader[item],
                       "make check": check.get(item),
                       "pytest tests": student.get(item),
                       "notebook": notebook.get(item)}
                for item in ITEMS
                if not grader[item] == check.get(item) == student.get(item)
                == notebook.get(item)}
    assert disagree == {}, text
    # Deductions and bonuses: the points each takes or adds. A module
    # that does not import shows no class's deductions in the notebook
    # (it says "fix the module first" once); the grader takes none then.
    extras = grader_extras(graded, name)
    assert list(extras) == EXTRAS
    if notebook_extras:   # it imports: every cell shows its class's checks
        assert set(notebook_extras) == set(EXTRAS), notebook_extras
    previewed = make_check_extras(text)
    disagree = {check: {"grader": extras[check],
                        "make check": previewed.get(check),
                        "notebook": notebook_extras.get(check, 0.0)}
                for check in EXTRAS
                if not extras[check] == previewed.get(check)
                == notebook_extras.get(check, 0.0)}
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
