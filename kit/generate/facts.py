"""The rubric's facts, written into the documents that state them.

``autograder/rubric.toml`` is the one place a point, a title or the bonus
rule is written. Documents that state them (the staff README, the student
README) hold generated blocks, as does docs/shape-comments.md for the
shape-comment notation of the homework's ``shape_notation.toml``. The
selected homework's profile lists its documents (``[docs] facts``, paths
relative to its folder), so a homework's facts reach its documents only::

    <!-- facts:points-table -->
    ...generated from the rubric...
    <!-- /facts -->

``make facts`` (``python -m kit.generate facts [--check]``) rewrites every
block from the rubric, or lists each stale document (``make test`` checks
them through kit_tests/test_facts.py), so a changed point is one edit
plus ``make facts``.
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Callable

from autograder import homework
from autograder.checks.shape_notation import notation_of
from autograder.local import notebook_task
from autograder.submission.imports import allowed_words
from autograder.rubric import Rubric, load_rubric

# A block's markers may follow a comment prefix ("# " in a TOML file): the
# block's lines then each carry it.
BLOCK = re.compile(r"^([ \t]*(?:#[ \t]*)?)(<!-- facts:([a-z-]+) -->\n)"
                   r"(.*?)^\1(<!-- /facts -->)", re.S | re.M)


class FactsError(ValueError):
    """A document names a block this module cannot write."""


def _num(x: float) -> str:
    return f"{x:g}"


def _plural(x: float, word: str = "point") -> str:
    return f"{_num(x)} {word}{'s' * (x != 1)}"


def parts(rubric: Rubric) -> dict[str, float]:
    """Part number ("1", "2", "3") -> its points (items only)."""
    found: dict[str, float] = {}
    for task in rubric.tasks:
        for item in task.items:
            part = item.id.split(".")[0]
            found[part] = found.get(part, 0.0) + item.points
    return found


def scored_questions() -> dict[str, float]:
    """The notebook's questions that carry points (the staff score them),
    with their points, from the homework's questions.toml."""
    from autograder.term.course import question_points
    return {q: p for q, p in
            question_points(homework.staff().questions).items() if p > 0}


def score_summary(rubric: Rubric) -> str:
    """"Scores are out of 16 (Part 1: 4, ...) plus a 1-point bonus"; with
    scored questions, their points too."""
    per_part = ", ".join(f"Part {p}: {_num(v)}"
                         for p, v in parts(rubric).items())
    hw = homework.staff()
    where = f"`{_relative(hw.rubric, hw.root)}`"
    text = f"Scores are out of {_num(rubric.max_score)} ({per_part})"
    questions = scored_questions()
    if questions:
        asked = ", ".join(f"{q}: {_num(p)}" for q, p in questions.items())
        text = (f"Scores are out of "
                f"{_num(rubric.max_score + sum(questions.values()))}: "
                f"{_num(rubric.max_score)} autograded ({per_part}) and "
                f"{_num(sum(questions.values()))} for the notebook's "
                f"questions ({asked}), scored by the staff,")
        where += (f" (the questions' in "
                  f"`{_relative(hw.notebook_source, hw.root)}`)")
    if rubric.max_bonus:
        text += f" plus a {_num(rubric.max_bonus)}-point bonus"
    return f"{text}; the points live in {where}.\n"


def _relative(path: Path, root: Path) -> str:
    """``path`` as the homework's folder names it (posix)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:   # a profile's path outside its folder
        return path.as_posix()


def points_table(rubric: Rubric) -> str:
    """Every item, deduction and bonus of the rubric, one row each."""
    rows = ["| item | what is graded | points |", "| --- | --- | --- |"]
    for task in rubric.tasks:
        rows.append(f"| **{task.title}** | | "
                    f"**{_num(sum(i.points for i in task.items))}** |")
        rows += [f"| {i.id} | {i.title} | {_num(i.points)} |"
                 for i in task.items]
        rows += [f"| {d.id} | deduction: {d.title} | -{_num(d.points)} |"
                 for d in task.deductions]
        rows += [f"| {b.id} | bonus: {b.title} | +{_num(b.points)} |"
                 for b in task.bonuses]
    questions = scored_questions()
    rows += [f"| {q} | the notebook's question {q} (scored by the staff) | "
             f"{_num(p)} |" for q, p in questions.items()]
    total = rubric.max_score + sum(questions.values())
    rows.append(f"| | **total** | **{_num(total)}**"
                + (f" (+{_num(rubric.max_bonus)} bonus)"
                   if rubric.max_bonus else "") + " |")
    return "\n".join(rows) + "\n"


def task_list(rubric: Rubric) -> str:
    """One line per notebook task: "- 1.2 (3 points): SelfAttention"."""
    seen: dict[str, tuple[float, str]] = {}
    for task in rubric.tasks:
        name = task.title.split(": ", 1)[-1]
        for item in task.items:
            key = notebook_task(item.id)
            points, _ = seen.get(key, (0.0, name))
            seen[key] = (points + item.points, name)
    return "".join(f"- {key} ({_plural(points)}): {name}\n"
                   for key, (points, name) in seen.items())


def shape_notation(rubric: Rubric) -> str:
    """The shape-comment notation (size names and forms) as the notebook
    shows it, from the homework's ``shape_notation.toml``."""
    return notation_of(homework.staff()).markdown().rstrip("\n") + "\n"


def allowed_imports(rubric: Rubric) -> str:
    """What a submission may import (``autograder/imports.toml``), as
    the rubric and the READMEs say it, wrapped for a comment."""
    text = (f"A submission may import {allowed_words()}, nothing else: "
            f"`check` and `make submission` refuse any other import, "
            f"naming it, because the grader does not have it (the list: "
            f"`autograder/imports.toml`).")
    return textwrap.fill(text, 72) + "\n"


WRITERS: dict[str, Callable[[Rubric], str]] = {
    "allowed-imports": allowed_imports,
    "score-summary": score_summary,
    "points-table": points_table,
    "task-list": task_list,
    "shape-notation": shape_notation,
}


# The blocks that state the rubric's points (the others: its notation).
POINT_BLOCKS = ("score-summary", "points-table", "task-list")


def documents() -> tuple[str, ...]:
    """The selected homework's documents with facts blocks (relative to
    its folder)."""
    return homework.staff().fact_documents


def home() -> Path:
    """The folder the documents' paths are relative to."""
    return homework.staff().root


def point_documents(root: Path | None = None) -> list[str]:
    """The documents (under ``root``, default the homework's folder) with
    a block that states points: those a changed point makes stale."""
    root = root or home()
    return [doc for doc in documents()
            if any(f"<!-- facts:{name} -->" in (root / doc).read_text()
                   for name in POINT_BLOCKS)]


def fill(text: str, rubric: Rubric, where: str = "document") -> str:
    """``text`` with every facts block rewritten from ``rubric``."""
    def one(match: re.Match) -> str:
        prefix, name = match.group(1), match.group(3)
        if name not in WRITERS:
            raise FactsError(f"{where}: unknown facts block {name!r} "
                             f"(known: {', '.join(WRITERS)})")
        body = WRITERS[name](rubric)
        if prefix:
            body = "".join((prefix + line).rstrip() + "\n"
                           for line in body.splitlines())
        return prefix + match.group(2) + body + prefix + match.group(5)
    return BLOCK.sub(one, text)


def stale(rubric: Rubric, root: Path | None = None) -> list[str]:
    """Documents (under ``root``, default the homework's folder) whose
    facts blocks differ from ``rubric``."""
    return list(_refilled(rubric, root or home()))


def _refilled(rubric: Rubric, root: Path) -> dict[str, str]:
    """Document -> its text with the blocks filled from ``rubric``, for
    each document whose blocks differ (each read and filled once)."""
    found = {}
    for doc in documents():
        text = (root / doc).read_text()
        filled = fill(text, rubric, doc)
        if filled != text:
            found[doc] = filled
    return found


def write() -> int:
    """Rewrite every stale document's facts blocks from the rubric; 0, or
    2 when a document's blocks cannot be filled (said on stderr)."""
    root = home()
    try:
        refilled = _refilled(load_rubric(), root)
    except FactsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for doc, text in refilled.items():
        path = root / doc
        path.write_text(text)
        print(f"updated {path}")
    return 0
