"""The grader's value checks run in the student's own process: the one
checker behind ``pytest tests`` and the notebook's check cells.

``make check`` and the grader run the rubric's checks on probes answered by
a sandboxed worker; here the same probes are answered in this process
(``autograder.sandbox.worker`` without the sandbox: the student runs their own
code) and judged by the same check kinds, on the public cases read by the
same loader (``autograder.values``), at the rubric's tolerances.
``pytest tests`` runs the rubric's items (behaviour) only, one test each;
the notebook's check cells run every check of the classes a notebook task
belongs to (``check_task``): items, deductions (PEP 8, shape comments
against the traced shapes, grader access) and the bonus, with the task's
floor, so a cell's verdict is the grader's.

The rubric and the cases are the caller's (``pytest tests``' conftest, the
notebook's ``run_check``): no function here reads a default one.
"""
from __future__ import annotations

import linecache
import re
import sys
from dataclasses import replace
from pathlib import Path

import torch

from autograder.config import GradingConfig
from autograder.grade import CheckResult, GradeResult, grade_source
from autograder.sandbox.protocol import Probe, ProbeResult
from autograder.rubric import Check, Rubric, Task
from autograder.sandbox.student_module import MODULE_NAME
from autograder.sandbox.worker import execute_probes
from autograder.files.user_files import read_regular_text

# What these checkers check, said by each of them: the pytest header
# (items only) and the notebook's check cells (every check of the class).
SCOPE = "values only; `make check` adds PEP 8 and shape comments"
TASK_SCOPE = "values, deductions and bonus, as `make check` grades them"


def in_process_runner(source: str, filename: str,
                      probes: list[Probe]) -> list[ProbeResult]:
    """Answer ``probes`` in this process, as the sandbox's worker would
    (one thread, the probe's own seeds), leaving the caller's random state,
    thread count and module table as they were."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # the worker's setting: the same floats
    try:
        with torch.random.fork_rng(devices=[]):
            return list(execute_probes(source, filename, probes))
    finally:
        torch.set_num_threads(threads)
        sys.modules.pop(MODULE_NAME, None)
        # The worker pins the source in linecache; the student's later
        # tracebacks must show the file as it is then.
        linecache.cache.pop(filename, None)


def notebook_task(item_id: str) -> str:
    """The notebook task an item belongs to: "2.3a" -> "2.3"."""
    return re.sub(r"[a-z]+$", "", item_id)


def value_rubric(rubric: Rubric, task_id: str | None = None) -> Rubric:
    """``rubric`` with its items only (no deductions, no bonus); with
    ``task_id`` ("2.3"), only the items of that notebook task."""
    tasks = []
    for task in rubric.tasks:
        items = tuple(i for i in task.items if task_id is None
                      or notebook_task(i.id) == task_id)
        if items:
            tasks.append(replace(task, items=items, deductions=(),
                                 bonuses=()))
    return replace(rubric, tasks=tuple(tasks))


def bonus_task(task: Task, bonus: Check) -> str:
    """The notebook task a bonus of ``task`` belongs to: that of the first
    item it requires (else of the task's first item)."""
    return notebook_task(bonus.requires[0] if bonus.requires
                         else task.items[0].id)


def bonus_points(rubric: Rubric) -> dict[str, float]:
    """Notebook task -> the bonus points that need its items."""
    found: dict[str, float] = {}
    for task in rubric.tasks:
        for bonus in task.bonuses:
            key = bonus_task(task, bonus)
            found[key] = found.get(key, 0.0) + bonus.points
    return found


def class_rubric(rubric: Rubric, task_id: str) -> Rubric:
    """``rubric`` with only the tasks (graded classes) that hold an item
    of notebook task ``task_id``, each whole: all its items, deductions
    and bonuses, so that the floor and the bonus rule apply as in the
    grade."""
    return replace(rubric, tasks=tuple(
        t for t in rubric.tasks
        if any(notebook_task(i.id) == task_id for i in t.items)))


def points_text(task_id: str, rubric: Rubric) -> str:
    """``3 points, +1 bonus`` for a notebook task, from the rubric: what
    the notebook and the skeleton's task headers say."""
    points = task_points(rubric).get(task_id, 0.0)
    text = f"{points:g} point{'s' * (points != 1)}"
    bonus = bonus_points(rubric).get(task_id)
    return text + (f", +{bonus:g} bonus" if bonus else "")


def bonus_rule(task_id: str, rubric: Rubric) -> str:
    """The bonus of a notebook task as the rubric states it (the one
    place the rule is written), e.g. "**Bonus (+1 point):** ..."."""
    rules = [b for t in rubric.tasks for b in t.bonuses
             if b.requires and notebook_task(b.requires[0]) == task_id]
    return " ".join(f"**Bonus (+{b.points:g} point"
                    f"{'s' * (b.points != 1)}):** {b.title}." for b in rules)


def task_points(rubric: Rubric) -> dict[str, float]:
    """Notebook task -> its points (the sum of its items), rubric order."""
    points: dict[str, float] = {}
    for task in rubric.tasks:
        for item in task.items:
            key = notebook_task(item.id)
            points[key] = points.get(key, 0.0) + item.points
    return points


def check_values(config: GradingConfig, path: Path | str | None = None, *,
                 task_id: str | None = None) -> GradeResult:
    """Grade the module at ``path`` (default
    ``transformer_lm/modeling_attention.py``) on ``config``'s cases (the
    public ones: ``load_config(sets=("public",))``) with its rubric's
    items, in this process. ``task_id`` limits it to one notebook task's
    items."""
    path = Path(path or config.profile.module)
    config = replace(config, rubric=value_rubric(config.rubric, task_id))
    source = read_regular_text(path, follow_links=True)
    return grade_source(source, str(path), config, in_process_runner,
                        name=path.stem, public_only=True)


def check_task(config: GradingConfig, path: Path | str | None = None, *,
               task_id: str) -> GradeResult:
    """Grade the module at ``path`` (default the students' module) as the
    grader does, on ``config``'s cases, in this process: every check
    (items, deductions, bonuses) of the classes that notebook task
    ``task_id`` belongs to (``class_rubric``)."""
    path = Path(path or config.profile.module)
    config = replace(config, rubric=class_rubric(config.rubric, task_id),
                     whole_task_methods=config.task_methods)
    return grade_source(path.read_text(), str(path), config,
                        in_process_runner, name=path.stem, public_only=True)


def items(grade: GradeResult) -> list[CheckResult]:
    """Every item's result, in rubric order."""
    return [item for task in grade.tasks for item in task.items]


def _points(value: float) -> str:
    return f"{value:g} point{'s' * (abs(value) != 1)}"


def item_text(result: CheckResult, details: bool = True) -> str:
    """``✔ 1.2 (3 points) title`` and, when ``details`` and it failed, the
    grader's explanation below it. A deduction says what it takes
    (``✘ 1.pep8 (deduction: -1 point) ...``, or ``not taken``), a bonus
    what it adds (``+1 point``, or ``not earned: +1 point``)."""
    check = result.check
    mark = "✔" if result.outcome.passed else "✘"
    if check.section == "deduction":
        points = (f"deduction: -{_points(-result.applied)}"
                  if result.applied else
                  f"deduction, not taken: -{_points(check.points)}"
                  if result.outcome.passed else
                  f"deduction: -{_points(check.points)}, limited to 0")
    elif check.section == "bonus":
        points = (f"bonus: +{_points(result.applied)}" if result.applied
                  else f"bonus, not earned: +{_points(check.points)}")
    else:
        points = _points(check.points)
    lines = [f"{mark} {check.id} ({points}) {check.title}"]
    if details and not result.outcome.passed:
        lines += ["    " + line for line in result.outcome.lines]
    return "\n".join(lines)


__all__ = ["SCOPE", "TASK_SCOPE", "bonus_task",
           "check_task", "check_values", "class_rubric",
           "in_process_runner", "item_text", "items", "notebook_task",
           "task_points", "value_rubric"]
