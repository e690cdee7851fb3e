"""Public checks for the notebook: ``check("1.2")``, ``run_check("1.2")``,
and ``import_module()``, its import of the students' module.

The notebook's check cells call ``check`` with a task id ("1.1", "1.2",
"2.3", ...: the rubric's item ids without their letter, so "2.3" runs
items 2.3a and 2.3b). It grades the class the task belongs to as the
grader does, on the public cases, in this process
(``autograder.local.check_task``): the same values, comparisons and
tolerance, the class's deductions (PEP 8, shape comments against the
traced shapes, grader access) with the task's floor, and the bonus. It
shows the task's items, the class's deductions and the task's bonus.
The students' module (the homework profile's ``[module] file``) is read
afresh on every call, so saved edits are always picked up. Any
homework's notebook uses this one module: what it checks comes from the
profile and the rubric.

``check`` returns the task's verdict, shown once as the cell's output
(which items passed, and for each failing one what differs, where, by how
much, and the common mistake it looks like), its lines wrapped at word
boundaries: JupyterLab breaks long output lines anywhere, mid-word
included. ``run_check`` (otter's ``grader.check`` tests, scripts) prints
the same verdict when the task passes and raises AssertionError with it
when an item fails or a deduction is taken: a cell says "passed" only
where `make check` takes no point.

The notebook's import cell imports ``check`` first, then the module with
``import_module()``: a module that does not import (a syntax error) is
one message naming the file and line, no traceback, and since ``check``
is defined every check cell then says "fix the module first", after a
kernel restart too. In IPython the module is re-imported before a cell
runs once its file has changed (in place of ``%autoreload``, which
printed a failed reload's traceback, twice); a failed re-import is one
line above the cell's output (none above a check cell, which says it).
"""
from __future__ import annotations

import html
import importlib
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder import homework
from autograder.config import GradingConfig, load_mistake_messages
from autograder.grade import GradeResult
from autograder.local import (TASK_SCOPE, bonus_task, check_task,
                              item_text, notebook_task, task_points)
from autograder.rubric import Rubric, load_rubric
from autograder.values import load_cases


def tasks(rubric: Rubric) -> tuple[str, ...]:
    """The task ids ``run_check`` accepts, in ``rubric``'s order."""
    return tuple(task_points(rubric))


# Verdict lines are wrapped to this many characters: narrower than a
# notebook's output area on a laptop screen, so no front end re-wraps them.
WIDTH = 78


def wrap(text: str, width: int = WIDTH) -> str:
    """``text`` with every line longer than ``width`` broken at spaces
    (never inside a word; a word longer than a line stays whole); a
    continued item or bullet line is indented under its first word."""
    out = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        indent = line[:len(line) - len(body)]
        hang = "  " if body.startswith(("- ", "✔ ", "✘ ")) else ""
        out.append(textwrap.fill(
            body, width, initial_indent=indent,
            subsequent_indent=indent + hang, break_long_words=False,
            break_on_hyphens=False) if len(line) > width else line)
    return "\n".join(out)


@dataclass(frozen=True)
class Verdict:
    """One task's verdict on the public cases, as a check cell shows it:
    plain text in a terminal, the same text in a word-wrapping block in
    a notebook."""
    task_id: str
    passed: bool
    text: str

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:   # what a notebook shows as text/plain
        return self.text

    def _repr_html_(self) -> str:
        return ('<pre style="white-space: pre-wrap; word-break: normal; '
                'overflow-wrap: break-word; margin: 0">'
                f"{html.escape(self.text)}</pre>")


def verdict(task_id: str, path: Path | str | None = None) -> Verdict:
    """Check one task on the public cases (``path``: another module file
    instead of the profile's students' module); ValueError for a task the
    rubric does not have, RuntimeError if the checker itself fails."""
    rubric = load_rubric()   # the grader's, read afresh like the module
    if task_id not in tasks(rubric):
        raise ValueError(f"unknown task {task_id!r}; one of "
                         f"{tasks(rubric)}")
    config = GradingConfig(rubric, load_cases(sets=("public",)),
                           load_mistake_messages())
    grade = check_task(config, path or homework.current().module,
                       task_id=task_id)
    if grade.internal_error:
        raise RuntimeError(f"the checker itself failed (not your code):\n"
                           f"{grade.internal_error}")
    return Verdict(task_id, *_verdict_text(task_id, grade))


def _verdict_text(task_id: str, grade: GradeResult) -> tuple[bool, str]:
    """Whether the task passed (its items pass, no deduction is taken) and
    the cell's text: a headline, the task's items, the deductions of its
    class and its bonus."""
    scope = f"({TASK_SCOPE})"
    if grade.import_error:
        return False, wrap(
            f"Task {task_id}: fix the module first: it does not import, "
            f"so no check can run {scope}:\n"
            + "\n".join("    " + line
                        for line in grade.import_error.split("\n")))
    own = [r for t in grade.tasks for r in t.items
           if notebook_task(r.check.id) == task_id]
    deductions = [(t.task, r) for t in grade.tasks for r in t.deductions]
    bonuses = [r for t in grade.tasks for r in t.bonuses
               if bonus_task(t.task, r.check) == task_id]
    failed = [r for r in own if not r.outcome.passed]
    taken = [(task, r) for task, r in deductions if r.applied]
    lost = -sum(r.applied for _, r in taken)
    lines = [item_text(r) for r in own]
    if deductions:
        classes = ", ".join(dict.fromkeys(task.cls for task, _ in deductions))
        lines.append(f"Deductions of {classes} (taken once for the "
                     f"class, whichever task's code they are in):")
        lines += [item_text(r) for _, r in deductions]
    lines += [item_text(r) for r in bonuses]
    count = f"{len(own)} item{'s' * (len(own) > 1)}"
    if failed:
        head = (f"Task {task_id}: {len(failed)} of {count} failed on the "
                f"public cases")
    elif taken:
        passed_items = "its item" if len(own) == 1 else f"all {count}"
        head = (f"Task {task_id}: {passed_items} passed on the public "
                f"cases, but deductions take {lost:g} point"
                f"{'s' * (lost != 1)}")
    else:
        head = f"Task {task_id}: passed on the public cases"
    passed = not failed and not taken
    return passed, wrap(f"{head}\n{scope}:\n" + "\n".join(lines))


def check(task_id: str, path: Path | str | None = None) -> Verdict:
    """The notebook's check cell: the verdict of one task, to be shown as
    the cell's output (it never raises for a failing item, so a "Run All"
    goes on to the next task)."""
    return verdict(task_id, path)


def run_check(task_id: str, path: Path | str | None = None) -> None:
    """Check one task on the public cases: print its verdict if it passes,
    raise AssertionError with it if an item fails."""
    result = verdict(task_id, path)
    if not result.passed:
        raise AssertionError(result.text)
    print(result.text)


# -- the students' module in the notebook ------------------------------------

class ModuleImportError(Exception):
    """The students' module does not import: shown as its message alone
    (IPython's ``_render_traceback_``), no traceback."""

    def _render_traceback_(self) -> list[str]:
        return wrap(str(self)).split("\n")


def _why(error: BaseException, path: Path) -> str:
    """``SyntaxError: '(' was never closed (line 60: x = ()``: the
    exception and the line of ``path`` it points to."""
    line = None
    if isinstance(error, SyntaxError) and error.filename and \
            Path(error.filename).resolve() == path.resolve():
        line = error.lineno
        what = f"{type(error).__name__}: {error.msg}"
    else:
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if Path(f.filename).resolve() == path.resolve()]
        line = frames[-1].lineno if frames else None
        what = f"{type(error).__name__}: {error}"
    if line is None:
        return what
    lines = path.read_text(errors="replace").splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return f"{what} (line {line}: {text})" if text else \
        f"{what} (line {line})"


def _module_name() -> tuple[str, Path]:
    profile = homework.current()
    return f"{profile.package}.{profile.module_stem}", profile.module


_watcher: Any = None   # the IPython hook of the last import_module()


def import_module() -> Any:
    """The students' module, imported for the notebook's import cell;
    ModuleImportError (one message, naming the file and line) if it does
    not import. In IPython, it is re-imported in place before each later
    cell once its file has changed."""
    global _watcher
    name, path = _module_name()
    try:
        module = importlib.import_module(name)
    except Exception as error:   # noqa: BLE001 - the student's module
        sys.modules.pop(name, None)
        raise ModuleImportError(
            f"{path.name} does not import: {_why(error, path)}. Fix the "
            f"module first, save it, and run this cell again (until "
            f"then every check cell says so).") from None
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    if shell is None:
        return module   # not in IPython: nothing re-imports it
    if _watcher is not None:
        shell.events.unregister("pre_run_cell", _watcher)
    _watcher = _Reimport(module, path)
    shell.events.register("pre_run_cell", _watcher)
    return module


class _Reimport:
    """IPython's pre_run_cell hook: re-import the module when its file
    changed; while it does not import, say so in one line above the
    cell's output (the check cells say it themselves)."""

    def __init__(self, module: Any, path: Path) -> None:
        self.module, self.path = module, path
        self.stamp = self._stamp()
        self.broken = ""

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def __call__(self, info: Any = None) -> None:
        stamp = self._stamp()
        if stamp != self.stamp:
            self.stamp = stamp
            try:
                importlib.reload(self.module)
                self.broken = ""
            except Exception as error:   # noqa: BLE001 - student code
                self.broken = _why(error, self.path)
        cell = getattr(info, "raw_cell", "") or ""
        if self.broken and not cell.lstrip().startswith("check("):
            print(wrap(f"note: {self.path.name} does not import "
                       f"({self.broken}): this cell uses its last version "
                       f"that did; the check cells say where."))
