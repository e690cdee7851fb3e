"""Inline answers (Q1-Q5) of a submitted notebook, and per-question pages.

The notebook marks each answer cell with cell metadata
``{"kit": {"question": "Q1"}}`` and starts its text with ``**Answer Q1:**``.
Students edit cells freely (and some tools drop metadata), so a cell counts
as the answer to a question if either mark is present. TAs grade these by
hand: ``write_question_pages`` gathers every student's answer to one
question on one page, so a TA reads question by question.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autograder import mdsafe

if TYPE_CHECKING:   # imported only for a notebook json cannot read as v4
    import nbformat

QUESTIONS: tuple[str, ...] = ("Q1", "Q2", "Q3", "Q4", "Q5")

_PREFIX = re.compile(r"^\s*\*\*\s*Answer\s+(Q\d+)\s*:?\s*\*\*\s*:?", re.I)
# Text a cell holds before the student writes anything: our own prompt and
# otter assign's default for manually graded answers.
_PLACEHOLDERS = {
    "",
    "_type your answer here, replacing this text._",
    "type your answer here, replacing this text.",
    "_your answer here._",
    "your answer here.",
    "...",
}


class AnswersError(RuntimeError):
    """The notebook is missing or cannot be read; carries a message for the
    student. The grader reports it without taking code points off."""


def _cell_question(cell: nbformat.NotebookNode) -> str | None:
    meta = cell.get("metadata", {}).get("kit", {})
    if isinstance(meta, dict) and meta.get("sample"):
        return None  # the staff sample answer (master notebook only)
    if isinstance(meta, dict) and str(meta.get("question", "")) in QUESTIONS:
        return str(meta["question"])
    match = _PREFIX.match(cell.get("source", ""))
    if match and match.group(1).upper() in QUESTIONS:
        return match.group(1).upper()
    return None


def _answer_text(source: str) -> str:
    """The student's words: the cell without its ``**Answer Qn:**`` prefix
    and without untouched placeholder text."""
    text = _PREFIX.sub("", source, count=1).strip()
    return "" if text.lower() in _PLACEHOLDERS else text


def read_notebook(path: Path | str) -> nbformat.NotebookNode | dict:
    """The notebook at ``path``; AnswersError if missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise AnswersError(f"notebook not found: {path.name} is not in the "
                           f"submission, so the inline answers Q1-Q5 "
                           f"cannot be collected")
    plain = _plain_v4(path)
    if plain is not None:
        return plain
    try:
        import nbformat   # 0.2-2.5 s to import (jsonschema's formats)
        return nbformat.read(str(path), as_version=4)
    except Exception as exc:  # nbformat raises many types for bad JSON
        raise AnswersError(f"{path.name} is not a readable notebook "
                           f"({type(exc).__name__}: {exc}); save it from "
                           f"Jupyter and resubmit") from exc


def _plain_v4(path: Path) -> dict[str, Any] | None:
    """A well-formed v4 notebook read with json alone (what Jupyter saves),
    sources joined as nbformat joins them; None for anything else, which
    nbformat then reads (older versions, odd cells, bad JSON)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("nbformat") != 4:
        return None
    cells = data.get("cells")
    if not isinstance(cells, list) or \
            not all(_plain_cell(cell) for cell in cells):
        return None
    for cell in cells:
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
    return data


def _plain_cell(cell: Any) -> bool:
    if not isinstance(cell, dict) or \
            not isinstance(cell.get("metadata", {}), dict):
        return False
    source = cell.get("source", "")
    return isinstance(source, str) or isinstance(source, list) and \
        all(isinstance(line, str) for line in source)


def collect_answers(notebook_path: Path | str) -> dict[str, str]:
    """Answer text per question ``Q1``..``Q5`` (``""`` if unanswered).

    Several cells marked with the same question are joined in order, so a
    student who split an answer over two cells loses nothing.
    """
    nb = read_notebook(notebook_path)
    parts: dict[str, list[str]] = {q: [] for q in QUESTIONS}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") not in ("markdown", "raw", "code"):
            continue
        question = _cell_question(cell)
        if question is None:
            continue
        text = _answer_text(cell.get("source", ""))
        if text:
            parts[question].append(text)
    return {q: "\n\n".join(texts) for q, texts in parts.items()}


def _quote(text: str) -> str:
    # Student text is data: an escaped blockquote shows it verbatim, and
    # nothing in it (headings, </blockquote>, HTML) can leave the quote.
    return mdsafe.quote(text)


def write_question_pages(out_dir: Path | str,
                         answers_by_submission: dict[str, dict[str, str]]
                         ) -> list[Path]:
    """Write ``out_dir/answers/Q1.md`` .. ``Q5.md``: every submission's
    answer to that question, in submission-name order. Returns the pages."""
    pages_dir = Path(out_dir) / "answers"
    pages_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(answers_by_submission)
    pages = []
    for question in QUESTIONS:
        answered = sum(bool(answers_by_submission[n].get(question, "").strip())
                       for n in names)
        lines = [f"# {question}", "",
                 f"{answered} of {len(names)} submissions answered.", ""]
        for name in names:
            text = answers_by_submission[name].get(question, "").strip()
            lines += [f"## {mdsafe.inline(name, 200)}", "",
                      _quote(text) if text else "_(no answer)_", ""]
        page = pages_dir / f"{question}.md"
        page.write_text("\n".join(lines))
        pages.append(page)
    return pages


def answers_markdown(answers: dict[str, str] | None,
                     error: str = "") -> str:
    """A feedback.md section echoing the student's answers (graded by TAs),
    or the reason they could not be read. Never affects the score."""
    lines = ["## Inline answers (graded by hand)", ""]
    if error or answers is None:
        reason = mdsafe.inline(error or "no notebook")
        lines.append(f"Could not read your answers: {reason}."
                     f" This does not change your code score.")
        return "\n".join(lines) + "\n"
    for question in QUESTIONS:
        text = answers.get(question, "").strip()
        lines += [f"**{question}**", "",
                  _quote(text) if text else "_(no answer)_", ""]
    return "\n".join(lines)
