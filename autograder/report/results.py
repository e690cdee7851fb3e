"""Turn GradeResults into Gradescope's results.json, feedback.md, the
terminal preview of ``check``, grades.csv and the batch summary."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from autograder.files import atomic
from autograder.report import layout
from autograder.text import csvsafe, mdsafe
from autograder.grade import CheckResult, GradeResult, TaskResult

APOLOGY = ("Sorry: the autograder itself failed while grading your "
           "submission. This is not your fault and this score of 0 is not "
           "your grade: the course staff have been given the details and "
           "will regrade it.")
HIDDEN_NOTE = ("Hidden cases are graded on submission; their details are "
               "shown once grades are published.")
HIDDEN_PRINTED = ("Your code also printed during the hidden cases: shown "
                  "once grades are published.")
TRACEBACK_SHOWN = 20000   # characters of a grader traceback (staff)


# What `make check` checks (and the notebook's check cells, class by class),
# unlike `pytest tests` (values only, autograder/local.py).
CHECK_SCOPE = ("Checked as the grader does, on the public cases: values, "
               "PEP 8 and shape comments, and the bonus.")

IMPORT_FAILED = ("Your module does not import, so every item fails until "
                 "it does; fix this first:")


def _pts(value: float) -> str:
    return f"{value:g}"


def _total_text(grade: GradeResult) -> str:
    bonus = sum(b.applied for t in grade.tasks for b in t.bonuses)
    text = f"{_pts(grade.score)} / {_pts(grade.max_score)}"
    if bonus:
        text += f" (including a +{_pts(bonus)} bonus)"
    return text


def _item_status(result: CheckResult) -> str:
    return "passed" if result.outcome.passed else "failed"


def _task_points(task: TaskResult) -> str:
    bonus = sum(b.applied for b in task.bonuses)
    text = f"{_pts(task.score - bonus)} / {_pts(task.task.max_points)}"
    return text + (f" (+{_pts(bonus)} bonus)" if bonus else "")


# --------------------------------------------------------------------------
# results.json

def results_json(grade: GradeResult) -> dict[str, Any]:
    """Gradescope's results format. The score equals the sum of the test
    scores: items, deductions (negative, after the floor) and bonuses;
    the items' max_score add up to the rubric's max score."""
    tests: list[dict[str, Any]] = []
    if grade.internal_error or grade.error or not grade.tasks:
        message = mdsafe.inline(grade.error) if grade.error else APOLOGY
        if grade.internal_error and not grade.error:
            message += "\n\nFor staff:\n" + mdsafe.code_block(
                grade.internal_error[-3000:], 3000)
        tests.append({"name": "Grading", "score": 0.0,
                      "max_score": grade.max_score, "status": "failed",
                      "output": message, "output_format": "md",
                      "visibility": "visible"})
        return _top(grade, tests, message)
    hidden: list[str] = []
    for task in grade.tasks:
        for result in task.items:
            tests.append(_test(task, result, result.check.points))
            hidden += _hidden(result)
        for result in task.deductions:
            tests.append(_test(task, result, 0.0, prefix="Deduction"))
            hidden += _hidden(result)
        for result in task.bonuses:
            tests.append(_test(task, result, 0.0, prefix="Bonus"))
    failed = bool(hidden)
    if grade.hidden_stdout.strip():
        hidden.append(_printed_block(grade.hidden_stdout,
                                     "during the hidden cases"))
    if hidden:
        tests.append({
            "name": "Hidden cases: details (0 points)", "score": 0.0,
            "max_score": 0.0, "status": "failed" if failed else "passed",
            "output": "\n\n".join(hidden), "output_format": "md",
            "visibility": "after_published"})
    return _top(grade, tests, overview(grade))


def _top(grade: GradeResult, tests: list[dict[str, Any]],
         output: str) -> dict[str, Any]:
    return {
        "score": round(sum(t["score"] for t in tests), 6),
        "output": output,
        "output_format": "md",
        "stdout_visibility": "hidden",
        "execution_time": round(grade.seconds, 2),
        "tests": tests,
        "extra_data": {
            "submission": grade.name,
            "tasks": {t.task.id: t.score for t in grade.tasks},
            "mistakes": grade.mistakes(),
            "public_only": grade.public_only,
            "internal_error": bool(grade.internal_error),
            "error": bool(grade.error),
            "limits": dict(grade.limits),
            "jail": list(grade.jail),
            # item -> where its failing cases' values left the reference
            # and the relation named (checks/diagnosis): the class report
            # groups the class's failures by them.
            "diagnosis": {c.check.id: sorted(set(c.outcome.diagnosis))
                          for t in grade.tasks for c in t.items
                          if c.outcome.diagnosis},
        },
    }


def _test(task: TaskResult, result: CheckResult, max_score: float,
          prefix: str = "") -> dict[str, Any]:
    check = result.check
    name = f"{check.id} {check.title}"
    if prefix:
        name = f"{prefix} ({task.task.title}): {check.title}"
    else:
        name = f"{task.task.title} / {name}"
    lines = list(result.outcome.lines)
    if prefix == "Deduction" and result.applied:
        lines.insert(0, f"**{_pts(result.applied)} point**")
    return {"name": name, "number": check.id, "score": result.applied,
            "max_score": max_score, "status": _item_status(result),
            "output": "\n".join(lines), "output_format": "md",
            "visibility": "visible", "tags": [task.task.id]}


def _printed_block(text: str, when: str = "") -> str:
    when = f" {when}" if when else ""
    return (f"Your code printed{when} (shown for debugging; printing is not "
            f"needed):\n" + mdsafe.code_block(text))


def _hidden(result: CheckResult) -> list[str]:
    if not result.outcome.hidden_lines:
        return []
    return [f"**{result.check.id} {result.check.title}**\n"
            + "\n".join(result.outcome.hidden_lines)]


def overview(grade: GradeResult) -> str:
    """The top of the student's results: total, per task, what printed."""
    lines = [f"**Score: {_total_text(grade)}**", ""]
    for task in grade.tasks:
        lines.append(f"- {task.task.title}: {_task_points(task)}")
    if grade.public_only:
        lines += ["", f"These are the **public cases only**. {HIDDEN_NOTE}"]
    if grade.notes:
        lines += [""] + [f"Note: {note}" for note in grade.notes]
    mistakes = grade.mistakes()
    if mistakes:
        # (a fact of values: other code can give the same numbers)
        lines += ["", "Your values equal those of common mistakes: "
                  + ", ".join(f"`{m}`" for m in mistakes)]
    if grade.stdout.strip():
        lines += ["", _printed_block(grade.stdout)]
    if grade.hidden_stdout.strip():
        lines += ["", HIDDEN_PRINTED]
    if grade.answers:
        lines += ["", grade.answers.rstrip()]
    return "\n".join(lines)


def write_results(grade: GradeResult, path: Path) -> dict[str, Any]:
    """Write results.json atomically and return its content."""
    data = results_json(grade)
    write_json(data, path)
    return data


def write_json(data: dict[str, Any], path: Path) -> None:
    """Write JSON whole or not at all (autograder/files/atomic.py)."""
    atomic.write_text(path, json.dumps(data, indent=2, ensure_ascii=False)
                      + "\n")


# --------------------------------------------------------------------------
# feedback.md and the terminal preview

def feedback_markdown(grade: GradeResult, *, hidden_details: bool = True
                      ) -> str:
    """A readable report: per task its points, every check with its
    verdict and explanation, deductions with their line messages."""
    out = [f"# Feedback: {mdsafe.inline(grade.name, 200)}", "",
           f"File: {mdsafe.code_span(grade.filename)}", ""]
    if grade.error or grade.internal_error or not grade.tasks:
        out.append(f"**Score: 0 / {_pts(grade.max_score)}**\n")
        out.append(mdsafe.inline(grade.error) if grade.error else APOLOGY)
        if grade.internal_error:
            out += ["", "For staff:", mdsafe.code_block(
                grade.internal_error[-TRACEBACK_SHOWN:], TRACEBACK_SHOWN)]
        return "\n".join(out) + "\n"
    out += [overview(grade), ""]
    for task in grade.tasks:
        out += [f"## {task.task.title}: {_task_points(task)}", ""]
        if task.not_implemented:
            out += ["_Not implemented yet._", ""]
        for result in task.items:
            mark = "✔" if result.outcome.passed else "✘"
            out.append(f"### {mark} {result.check.id} {result.check.title} "
                       f"({_pts(result.applied)} / "
                       f"{_pts(result.check.points)})")
            out += [""] + result.outcome.lines + [""]
        for label, results in (("Deductions", task.deductions),
                               ("Bonus", task.bonuses)):
            if not results:
                continue
            out += [f"### {label}", ""]
            for result in results:
                out.append(f"- **{result.check.title}**: "
                           f"{_pts(result.applied)}")
                out += ["  " + line for line in result.outcome.lines]
            out.append("")
    hidden = [h for t in grade.tasks for r in t.items for h in _hidden(r)]
    if grade.hidden_stdout.strip():
        hidden.append(_printed_block(grade.hidden_stdout,
                                     "during the hidden cases"))
    if hidden_details and hidden:
        out += ["## Hidden cases: details (staff; students see these once "
                "grades are published)", ""] + hidden
    return "\n".join(out).rstrip() + "\n"


def check_text(grade: GradeResult) -> str:
    """The terminal preview of ``python -m autograder check``."""
    if grade.error or grade.internal_error or not grade.tasks:
        return feedback_markdown(grade)
    out = [CHECK_SCOPE, ""]
    if grade.import_error:
        # Said once, not under each of the items it fails.
        out += [IMPORT_FAILED, *("  " + _plain(line) for line in
                                 grade.import_error.split("\n")), ""]
    for task in grade.tasks:
        out += [f"{task.task.title}: {_task_points(task)}"]
        for result in (*task.items, *task.deductions, *task.bonuses):
            mark = "ok  " if result.outcome.passed else "FAIL"
            section = {"item": "", "deduction": "deduction: ",
                       "bonus": "bonus: "}[result.check.section]
            out.append(f"  [{mark}] {result.check.id} {section}"
                       f"{result.check.title} ({_pts(result.applied)})")
            if grade.import_error and result.check.section == "item":
                continue
            out += ["         " + _plain(line)
                    for line in result.outcome.lines
                    if not result.outcome.passed
                    or result.check.section == "item"]
        out.append("")
    if grade.stdout.strip():
        out += ["Your code printed:",
                mdsafe.clean(grade.stdout, mdsafe.OUTPUT_LIMIT).rstrip(), ""]
    out += time_lines(grade.timing)
    bonus = sum(b.applied for t in grade.tasks for b in t.bonuses)
    out.append(f"public: {_pts(grade.score - bonus)} / "
               f"{_pts(grade.max_score)} points (+{_pts(bonus)} bonus); "
               f"hidden cases: graded after you submit")
    return "\n".join(out)


def time_lines(timing: dict[str, float]) -> list[str]:
    """What ``check`` says on time: the calls' time against the grader's
    limits (the same in ``check`` and the grade), whether a limit was hit
    and what that skipped, and, past half the total limit, that the
    grade's hidden cases run within the same total."""
    if not timing or not timing.get("calls"):
        return []
    calls, seconds = int(timing["calls"]), timing["seconds"]
    total, per_call = timing["total_limit"], timing["call_limit"]
    lines = [f"time: your code's {calls} calls took {seconds:.1f} s "
             f"({seconds / calls:.2f} s per call, the slowest "
             f"{timing['slowest']:.1f} s); the grader's limits: "
             f"{per_call:g} s per call, {total:g} s for all the calls of "
             f"a submission"]
    if timing.get("timed_out"):
        lines.append(f"time limit hit: {int(timing['timed_out'])} calls "
                     f"ran past {per_call:g} s; their items scored 0 here "
                     f"and will in the grade")
    if timing.get("skipped"):
        lines.append(f"time limit hit: {int(timing['skipped'])} calls did "
                     f"not run (after a limit was hit); their items "
                     f"scored 0 here and will in the grade")
    elif seconds > total / 2:
        lines.append(f"warning: the grade runs the hidden cases' calls "
                     f"after these, within the same {total:g} s: at "
                     f"{seconds / calls:.2f} s per call about "
                     f"{int(total / (seconds / calls))} calls fit in all, "
                     f"and the items of calls that do not run get 0. "
                     f"Make forward faster")
    return [*lines, ""]


def _plain(line: str) -> str:
    # A terminal shows markdown source: drop the backslashes that escape
    # quoted student text (mdsafe.inline), keep everything else.
    return _MD_ESCAPE.sub(r"\1", line)


_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


# --------------------------------------------------------------------------
# Batch outputs

# grades.csv's note (and the summary's) for a submission the grader failed
GRADER_ERROR = "GRADER ERROR"
PATH_CHARS = 400     # of grades.csv's path column (then "...")


def csv_columns(task_ids: list[str], paths: bool = False) -> list[str]:
    """grades.csv's header: submission, score, max_score, task ids (and
    with ``paths``, the path column)."""
    return ["submission", "score", "max_score", *task_ids,
            *([layout.PATH_COLUMN] if paths else [])]


def grade_row(grade: GradeResult | dict[str, Any]) -> dict[str, Any]:
    """One submission's line of grades.csv and of the summary: ``name``,
    ``score``, ``max_score``, ``tasks`` (id -> points) and ``note`` (a row
    given is returned as it is: one kept from an interrupted run,
    autograder/report/batch_state.py)."""
    if isinstance(grade, dict):
        return grade
    # a terminal: names and errors without control or invisible
    # characters (an escape sequence in a file name is the student's)
    note = (GRADER_ERROR if grade.internal_error else
            mdsafe.clean(grade.error, 60).replace("\n", " ")
            if grade.error else ", ".join(grade.mistakes())[:60])
    return {"name": grade.name, "score": grade.score,
            "max_score": grade.max_score,
            "tasks": {t.task.id: t.score for t in grade.tasks},
            "note": note}


def write_grades_csv(grades: list[GradeResult | dict[str, Any]],
                     task_ids: list[str], path: Path,
                     given: dict[str, str] | None = None) -> None:
    """One row per submission (a grade, or its :func:`grade_row`); a task
    column holds the task's points (its bonus included, so the task
    columns add up to the score). A submission the grader failed to grade
    has its score and task cells blank: no score was written for it.
    With ``given`` (submission name -> the path it was graded from), a
    last column holds that path as one bounded line. Cells go through
    autograder/text/csvsafe.py (no spreadsheet formula)."""
    rows: list[list[object]] = [csv_columns(task_ids, given is not None)]
    for row in map(grade_row, grades):
        if row["note"] == GRADER_ERROR:   # no score: blank, never a 0
            cells = [row["name"], "", row["max_score"],
                     *("" for _ in task_ids)]
        else:
            cells = [row["name"], row["score"], row["max_score"],
                     *(row["tasks"].get(t, 0.0) for t in task_ids)]
        if given is not None:
            cells.append(csvsafe.one_line(given.get(row["name"], ""),
                                          PATH_CHARS))
        rows.append(cells)
    csvsafe.write_rows(path, rows)


def grader_errors(grades: list[GradeResult | dict[str, Any]]) -> list[str]:
    """Names of the submissions the grader failed to grade (its own
    environment failed: no score was written for them)."""
    return [row["name"] for row in map(grade_row, grades)
            if row["note"] == GRADER_ERROR]


def summary_table(grades: list[GradeResult | dict[str, Any]],
                  task_ids: list[str]) -> str:
    """A fixed-width table of every submission's scores and notes."""
    header = ["submission", "score", *task_ids, "notes"]
    rows = []
    for row in map(grade_row, grades):
        # no score was written for a grader error: "-", never a 0
        unscored = row["note"] == GRADER_ERROR
        rows.append([mdsafe.clean(row["name"], 200).replace("\n", " "),
                     f"{'-' if unscored else _pts(row['score'])}/"
                     f"{_pts(row['max_score'])}",
                     *("-" if unscored else _pts(row["tasks"].get(t, 0.0))
                       for t in task_ids),
                     row["note"]])
    widths = [max(len(str(r[i])) for r in [header, *rows])
              for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
             for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
