"""The student README of the selected homework, rendered for its release.

``kit/student/README.md`` is one text for every homework: what is
particular to one is a placeholder filled from its profile, and its points
are facts blocks filled from its rubric (``kit/generate/facts.py``), so
the feed-forward release never speaks of attention. The placeholders:

    {{ heading }}   the notebook's title (its first "# " markdown heading)
    {{ summary }}   the profile's [release] summary: what students do
    {{ hidden }}    the profile's [release] hidden: what hidden cases vary
    {{ folder }}    the folder student.zip unpacks into ([release] folder)
    {{ module }}    the file students write ([module] file)
    {{ notebook }}  the notebook, relative to the release
    {{ notebooktests }}  otter's tests/ folder beside the notebook

A placeholder followed by two spaces or more keeps the column of the text
after it (the aligned file list). A leading HTML comment is a note to the
staff and is dropped. An unknown placeholder, or a notebook without a
title, is a ReadmeError naming it.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

from autograder import homework
from autograder.rubric import Rubric, load_rubric
from kit.generate.facts import fill

TEMPLATE = Path(__file__).resolve().parents[1] / "student" / "README.md"
PLACEHOLDER = re.compile(r"\{\{ ([a-z]+) \}\}( {2,})?")
NOTE = re.compile(r"\A<!--.*?-->\n", re.S)


class ReadmeError(ValueError):
    """The template or the homework lacks what the README needs."""


def heading(notebook: Path) -> str:
    """The notebook's title: its first markdown cell's "# " heading."""
    nb = nbformat.read(str(notebook), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = re.match(r"# (\S.*)", cell.source)
            if found:
                return found.group(1).strip()
    raise ReadmeError(f"{notebook} has no markdown cell starting with a "
                      f"'# ' title: give the notebook's source one")


def values(hw: homework.Homework) -> dict[str, str]:
    """The placeholders' text for homework ``hw`` (its staff profile)."""
    return {"heading": heading(hw.notebook), "summary": hw.summary,
            "hidden": hw.hidden, "folder": hw.release_folder,
            "module": hw.module_file,
            "notebook": hw.notebook.relative_to(hw.root).as_posix(),
            "notebooktests": (hw.notebook.parent / "tests").relative_to(
                hw.root).as_posix() + "/",
            # the homework's own check kinds' folders, one line each
            "kinds": "".join(
                f"{folder:<39}the checker's kinds for this homework\n"
                for folder in sorted({p.parent.relative_to(hw.root)
                                      .as_posix() + "/" for p in hw.kinds}))}


def render(template: str, hw: homework.Homework,
           rubric: Rubric | None = None) -> str:
    """``template`` with its placeholders filled from ``hw`` and its facts
    blocks from ``rubric`` (default: the homework's)."""
    known = values(hw)

    def one(match: re.Match) -> str:
        name, pad = match.group(1), match.group(2) or ""
        if name not in known:
            raise ReadmeError(f"{TEMPLATE.name}: unknown placeholder "
                              f"{{{{ {name} }}}} (known: {', '.join(known)})")
        if not pad:
            return known[name]
        width = len(match.group(0))   # keep the next text's column
        return known[name].ljust(width) if len(known[name]) + 2 <= width \
            else known[name] + "  "
    template = NOTE.sub("", template, count=1)
    text = fill(template, rubric or load_rubric(hw.rubric), TEMPLATE.name)
    return PLACEHOLDER.sub(one, text)


def write(dest: Path, hw: homework.Homework | None = None) -> Path:
    """Write the rendered README to ``dest`` (a file path)."""
    dest.write_text(render(TEMPLATE.read_text(encoding="utf-8"),
                           hw or homework.staff()), encoding="utf-8")
    return dest
