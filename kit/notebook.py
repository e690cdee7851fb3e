"""Build the otter-assign master notebook ``assignment/attention.ipynb``
from its text source ``assignment/attention.md``.

``python -m kit.notebook`` writes it; ``python -m kit.notebook --check``
exits 1 when the committed file differs from what the source builds.
``--master`` and ``--rubric`` build from other files (a copy under test).

The source is a jupytext MyST notebook (open it in JupyterLab with
jupytext, or read it as markdown; review it as a diff). The build is a
chain of small steps, one transformation each:

1. ``check_characters``: no control character but the newline (a TAB once
   ate the ``\\t`` of ``\\text`` and ``\\times`` in two formulas);
2. ``fill_facts``: ``{{ points 1.2 }}`` (``3 points, +1 bonus``),
   ``{{ table_points 1.2 }}`` (``3 (+1 bonus)``), ``{{ bonus_rule 1.2 }}``
   and ``{{ max_score }}`` from ``autograder/rubric.toml``; an unknown
   placeholder is an error naming its line;
3. ``fill_shape_notation``: the text between the ``<!-- shape-notation``
   markers, from ``shape_notation`` (the grader's notation);
4. ``jupytext.reads`` into cells, then ``drop_notes`` (a markdown cell that
   is only an HTML comment is a note to the instructor);
5. ``expand_tasks``: a markdown cell with metadata ``{"task": "1.2"}`` is a
   task statement; it becomes otter's question block (``# BEGIN QUESTION``,
   ``points`` from the rubric) with a test cell calling
   ``transformer_lm.checks.run_check("1.2")``. The test cell's second
   statement, ``report(test_task_1_2)``, runs the check in the master
   without raising (``report`` is defined in a ``# BEGIN IGNORE`` block);
6. ``expand_questions``: a markdown cell ``{"question": "Q1"}`` (the
   prompt) followed by one ``{"sample": "Q1"}`` (our sample answer) becomes
   a manual otter question: prompt, the student's answer cell, the sample
   in a solution block (otter assign deletes it), and a ``---`` cell;
7. ``attach_figures``: ``![...](figures/x.png)`` (so that the source
   previews) becomes a cell attachment, so the figure ships inside the
   notebook;
8. ``assign_ids``, then ``nbformat.validate``.

Answer-cell convention (read by the answer extractor): each inline question
Qn ("Q1".."Q5") has exactly one student answer cell in the student notebook,
a markdown cell with ``metadata["kit"] == {"question": "Qn"}``, cell id
``answer-qn`` and a source whose first line is ``**Answer Qn:**``; the
student writes below that line. The master also holds the sample answer, a
markdown cell with ``metadata["kit"] == {"question": "Qn", "sample": True}``,
id ``sample-qn`` and the same first line. Students may change cell ids, so
the extractor should match on the metadata first and fall back to the
heading line.
"""
from __future__ import annotations

import argparse
import base64
import inspect
import json
import mimetypes
import re
import sys
from pathlib import Path
from typing import Callable

import jupytext
import nbformat
from nbformat import NotebookNode

from autograder.checks.shape_notation import notation_markdown
from autograder.local import (SCOPE, bonus_points, bonus_rule,
                              points_text, task_points)
from autograder.rubric import Rubric, load_rubric

ROOT = Path(__file__).resolve().parents[1]
MASTER = ROOT / "assignment" / "attention.md"
OUT = ROOT / "assignment" / "attention.ipynb"
QUESTION_POINTS = 0  # inline questions: feedback only; change here if graded
LANGUAGE_INFO = {"name": "python"}

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
_NOTATION = re.compile(r"(<!-- shape-notation\b[^\n]*-->\n)(.*?)"
                       r"(\n<!-- end shape-notation -->\n?)", re.S)
_NOTE = re.compile(r"\s*<!--.*-->\s*", re.S)
_FIGURE = re.compile(r"\]\(figures/([^)\s]+)\)")


class MasterError(ValueError):
    """The notebook source is wrong; the message names the file and line."""


# -- text steps -------------------------------------------------------------

def check_characters(text: str, where: str) -> None:
    """MasterError naming every line with a control character (only the
    newline belongs in the source)."""
    bad = [f"{where}:{number}: control character {char!r}"
           for number, line in enumerate(text.split("\n"), 1)
           for char in line if ord(char) < 32 or ord(char) == 127]
    if bad:
        raise MasterError("\n".join(bad))


def table_points(task_id: str, rubric: Rubric) -> str:
    """A task's points as the intro's table shows them: ``3 (+1 bonus)``."""
    bonus = bonus_points(rubric).get(task_id)
    extra = f" (+{bonus:g} bonus)" if bonus else ""
    return f"{task_points(rubric)[task_id]:g}{extra}"


def _facts(rubric: Rubric) -> dict[str, Callable[..., str]]:
    """Placeholder name -> function of its arguments (strings)."""
    tasks = task_points(rubric)

    def task_id(value: str) -> str:
        if value not in tasks:
            raise ValueError(f"no task {value!r} in the rubric "
                             f"(it has {', '.join(tasks)})")
        return value

    return {
        "points": lambda t: points_text(task_id(t), rubric),
        "table_points": lambda t: table_points(task_id(t), rubric),
        "bonus_rule": lambda t: bonus_rule(task_id(t), rubric),
        "max_score": lambda: f"{rubric.max_score:g}",
    }


def fill_facts(text: str, rubric: Rubric, where: str) -> str:
    """Replace every ``{{ name args }}`` with the rubric's fact; an unknown
    name, a wrong argument or an unknown task id raises MasterError naming
    the line."""
    facts = _facts(rubric)
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        def fill(match: re.Match) -> str:
            name, *args = match.group(1).split() or [""]
            if name not in facts:
                raise MasterError(f"{where}:{number}: unknown placeholder "
                                  f"{match.group(0)!r} (known: "
                                  f"{', '.join(facts)})")
            wanted = len(inspect.signature(facts[name]).parameters)
            if len(args) != wanted:
                raise MasterError(f"{where}:{number}: {match.group(0)!r}: "
                                  f"{name} takes {wanted} argument(s)")
            try:
                return facts[name](*args)
            except ValueError as error:
                raise MasterError(f"{where}:{number}: {match.group(0)!r}: "
                                  f"{error}") from None
        lines[number - 1] = _PLACEHOLDER.sub(fill, line)
    return "\n".join(lines)


def shape_notation(written: str) -> str:
    """The shape-comment notation (size names, how to write a shape) as
    the grader reads it: ``notation_markdown()``, rendered from the same
    data the parser reads. ``written`` (the source's copy, kept for the
    preview in JupyterLab) is ignored."""
    return notation_markdown()


def fill_shape_notation(text: str,
                        notation: Callable[[str], str]) -> str:
    """The text between the shape-notation markers from ``notation``
    (given the text written there); the markers themselves are dropped."""
    return _NOTATION.sub(
        lambda m: notation(m.group(2)).strip("\n") + "\n", text)


# -- cell steps -------------------------------------------------------------

def _md(source: str, cell_id: str | None = None,
        kit: dict | None = None) -> NotebookNode:
    cell = nbformat.v4.new_markdown_cell(source)
    cell.id = cell_id
    if kit is not None:
        cell.metadata["kit"] = kit
    return cell


def _raw(source: str) -> NotebookNode:
    cell = nbformat.v4.new_raw_cell(source)
    cell.id = None
    return cell


def _copy(cell: NotebookNode, *drop: str) -> NotebookNode:
    """A fresh nbformat cell from a jupytext one, without ``drop`` keys."""
    make = {"markdown": nbformat.v4.new_markdown_cell,
            "code": nbformat.v4.new_code_cell,
            "raw": nbformat.v4.new_raw_cell}[cell.cell_type]
    new = make(cell.source, metadata={k: v for k, v in cell.metadata.items()
                                      if k not in drop})
    new.id = None
    return new


def _where(text: str, where: str, key: str, value: str) -> str:
    """``file:line`` of the cell marker ``+++ {"key": "value"...``."""
    needle = f'"{key}": {json.dumps(value)}'
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("+++") and needle in line:
            return f"{where}:{number}"
    return where


def drop_notes(cells: list[NotebookNode]) -> list[NotebookNode]:
    """Without the markdown cells that hold only an HTML comment."""
    return [c for c in cells if c.cell_type != "markdown"
            or not _NOTE.fullmatch(c.source)]


def expand_tasks(cells: list[NotebookNode], rubric: Rubric,
                 locate: Callable[[str, str], str]) -> list[NotebookNode]:
    """Each ``{"task": id}`` statement -> otter's question block with the
    test cell that runs the kit's check of that task."""
    points, out = task_points(rubric), []
    for cell in cells:
        task_id = cell.metadata.get("task")
        if task_id is None:
            out.append(cell)
            continue
        if task_id not in points:
            raise MasterError(f"{locate('task', task_id)}: no task "
                              f"{task_id!r} in the rubric")
        name = "task_" + task_id.replace(".", "_")
        # otter shows these under the cell's verdict: say what was checked.
        test = nbformat.v4.new_code_cell(
            '""" # BEGIN TEST CONFIG\n'
            f"success_message: 'passed on the public cases ({SCOPE})'\n"
            f"failure_message: 'the failing items are listed below "
            f"({SCOPE})'\n"
            '""" # END TEST CONFIG\n'
            f"def test_{name}():\n"
            "    from transformer_lm.checks import run_check\n"
            f'    run_check("{task_id}")\n\n\n'
            f"report(test_{name})")
        test.id = f"check-{name.replace('_', '-')}"
        out += [_raw(f"# BEGIN QUESTION\nname: {name}\n"
                     f"points: {points[task_id]:g}"),
                _copy(cell, "task"), _raw("# BEGIN TESTS"), test,
                _raw("# END TESTS"), _raw("# END QUESTION")]
    return out


def expand_questions(cells: list[NotebookNode],
                     locate: Callable[[str, str], str]
                     ) -> list[NotebookNode]:
    """Each ``{"question": Qn}`` prompt and the ``{"sample": Qn}`` cell
    after it -> a manual otter question with the student's answer cell."""
    out, index = [], 0
    while index < len(cells):
        cell = cells[index]
        index += 1
        qid = cell.metadata.get("question")
        if "sample" in cell.metadata:
            raise MasterError(f"{locate('sample', cell.metadata['sample'])}"
                              ": a sample answer must follow its question")
        if qid is None:
            out.append(cell)
            continue
        sample = cells[index] if index < len(cells) else None
        heading = f"**Answer {qid}:**"
        if sample is None or sample.metadata.get("sample") != qid \
                or sample.source.split("\n")[0] != heading:
            raise MasterError(
                f"{locate('question', qid)}: question {qid} needs the next "
                f"cell to be its sample answer, marked "
                f'{{"sample": "{qid}"}} and starting with {heading}')
        index += 1
        slug = qid.lower()
        prompt = _copy(cell, "question")
        out += [_raw(f"# BEGIN QUESTION\nname: {slug}\nmanual: true\n"
                     f"points: {QUESTION_POINTS}"),
                prompt, _raw("# BEGIN PROMPT"),
                _md(f"{heading}\n\n_Type your answer here, replacing this "
                    f"text._", f"answer-{slug}", {"question": qid}),
                _raw("# END PROMPT"), _raw("# BEGIN SOLUTION"),
                _md(sample.source, f"sample-{slug}",
                    {"question": qid, "sample": True}),
                _raw("# END SOLUTION"), _raw("# END QUESTION"),
                _md("---")]  # otter locks the cell after a manual question
    return out


def attach_figures(cells: list[NotebookNode],
                   folder: Path) -> list[NotebookNode]:
    """``](figures/name)`` links -> ``](attachment:name)`` with the file
    embedded, so the figure ships inside the notebook."""
    for cell in cells:
        names = _FIGURE.findall(cell.source) \
            if cell.cell_type == "markdown" else []
        if not names:
            continue
        attachments = {}
        for name in names:
            path = folder / "figures" / name
            if not path.is_file():
                raise MasterError(f"figure {path} is missing (the chart: "
                                  f"`make bench-attention`)")
            mime = mimetypes.guess_type(name)[0] or "image/png"
            attachments[name] = {
                mime: base64.b64encode(path.read_bytes()).decode()}
        cell.source = _FIGURE.sub(r"](attachment:\1)", cell.source)
        cell.attachments = attachments
    return cells


def assign_ids(cells: list[NotebookNode]) -> list[NotebookNode]:
    """Give cells without an explicit id a stable positional one."""
    for index, cell in enumerate(cells):
        if cell.id is None:
            cell.id = f"cell-{index:03d}"
    ids = [cell.id for cell in cells]
    if len(set(ids)) != len(ids):
        raise MasterError("duplicate cell ids in the notebook")
    return cells


# -- assembly ---------------------------------------------------------------

def build(master: Path | str = MASTER,
          rubric: Path | str | None = None) -> NotebookNode:
    """The otter master notebook from the source ``master`` and the rubric
    at ``rubric`` (default: the grader's), validated."""
    master = Path(master)
    where = str(master.relative_to(ROOT)) \
        if master.is_relative_to(ROOT) else str(master)
    loaded = load_rubric(rubric)
    text = master.read_text(encoding="utf-8")
    check_characters(text, where)
    source = jupytext.reads(
        fill_shape_notation(fill_facts(text, loaded, where), shape_notation),
        fmt="md:myst")

    def locate(key: str, value: str) -> str:
        return _where(text, where, key, value)

    cells = [_copy(c) for c in drop_notes(source.cells)]
    cells = expand_questions(expand_tasks(cells, loaded, locate), locate)
    cells = assign_ids(attach_figures(cells, master.parent))
    for cell in cells:  # what the expansions wrote, too
        check_characters(cell.source, f"built cell {cell.id}")
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": dict(source.metadata["kernelspec"]),
        "language_info": LANGUAGE_INFO,
    })
    nbformat.validate(nb)
    return nb


def render(master: Path | str = MASTER,
           rubric: Path | str | None = None) -> str:
    """The notebook file's exact text."""
    return nbformat.writes(build(master, rubric)) + "\n"


def stale(master: Path = MASTER, out: Path = OUT,
          rubric: Path | None = None) -> str | None:
    """Why ``out`` is not what ``master`` builds, with what to run, or
    None. Raises MasterError if the source does not build."""
    current = out.read_text() if out.exists() else ""
    if current != render(master, rubric):
        return (f"{out} is stale (not what {master.name} builds): run "
                f"`make build-notebook`")
    return None


def main(argv: list[str] | None = None) -> int:
    """Write the notebook, or with --check compare it to the file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--master", type=Path, default=MASTER,
                        help="the MyST source (default: %(default)s)")
    parser.add_argument("--rubric", type=Path, default=None,
                        help="the rubric (default: the grader's)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the file is not what the source "
                             "builds")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problem = stale(args.master, args.out, args.rubric)
            print(problem or f"{args.out} is up to date")
            return 1 if problem else 0
        text = render(args.master, args.rubric)
    except MasterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
