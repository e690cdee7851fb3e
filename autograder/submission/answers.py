"""Inline answers (Q1-Q5) of a submitted notebook, and per-question pages.

The questions are data: ``autograder/questions.toml``, generated from the
notebook's source by ``make generate`` (kit/generate/notebook.py), lists
them in notebook order; ``questions(hw)`` reads a homework's once (the
grader passes the homework it grades, default the one in use).

The notebook marks each answer cell with cell metadata
``{"kit": {"question": "Q1"}}`` and starts its text with ``**Answer Q1:**``.
Students edit cells freely (and some tools drop metadata), so a cell counts
as the answer to a question if either mark is present. TAs grade these by
hand: ``write_question_pages`` gathers every student's answer to one
question on one page, so a TA reads question by question.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autograder import homework
from autograder.files import atomic
from autograder.files.user_files import read_regular_text
from autograder.text import mdsafe

if TYPE_CHECKING:   # imported only for a notebook json cannot read as v4
    import nbformat

# A question id the answer prefix below can match ("Q1" .. "Q999").
_QUESTION_ID = re.compile(r"Q\d{1,3}")


class QuestionsError(ValueError):
    """The grader's list of questions cannot be read (a staff fault, not
    the student's); the message names the file and the fix."""


@functools.lru_cache(maxsize=None)
def load_questions(path: Path) -> tuple[str, ...]:
    """The question ids of ``path`` (``questions = ["Q1", ...]``), in
    notebook order; QuestionsError naming the file if it is unreadable,
    empty, repeats an id or holds one that is not ``Q<number>``."""
    try:
        found = tomllib.loads(Path(path).read_text(encoding="utf-8")
                              ).get("questions")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise QuestionsError(f"cannot read {path}: {exc}: regenerate it "
                             f"with `make generate`") from None
    if not isinstance(found, list) or not found \
            or not all(isinstance(q, str) and _QUESTION_ID.fullmatch(q)
                       for q in found) or len(set(found)) != len(found):
        raise QuestionsError(f"{path}: `questions` must be a list of "
                             f"distinct ids Q<number> (got {found!r}): "
                             f"regenerate it with `make generate`")
    return tuple(found)


def questions(hw: homework.Homework | None = None) -> tuple[str, ...]:
    """The notebook's questions, from the questions file of ``hw``
    (default: the homework in use)."""
    return load_questions((hw or homework.current()).questions)


def __getattr__(name: str) -> Any:
    # ``QUESTIONS`` stays importable, read when first asked for.
    if name == "QUESTIONS":
        return questions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Bounds on what a notebook can make the grading parent read (it runs in
# the parent, beside every other submission's grading threads).
# the .ipynb file: outputs (figures) included, as large as one file of a
# submission zip may be (submission.MAX_ZIP_FILE_BYTES)
MAX_NOTEBOOK_BYTES = 50_000_000
MAX_CELLS = 5000                      # cells looked at
MAX_CELL_CHARS = 100_000              # characters kept of one cell
MAX_ANSWER_CHARS = 200_000            # characters kept of one answer
PREFIX_WINDOW = 200                   # characters searched for the prefix

# The prefix, matched only against the first PREFIX_WINDOW characters of a
# cell (its leading whitespace stripped first): bounded input, and
# possessive quantifiers, so no backtracking over runs of spaces (the old
# ``\s*:?\s*`` split a run of n spaces n ways: quadratic, and the parent
# froze for minutes on one crafted cell).
_PREFIX = re.compile(r"\*\*\s*+Answer\s++(Q\d{1,3}+)\s*+:?\s*+\*\*(?:\s*+:)?",
                     re.I)
# A cell the notebook itself holds (kit.generate.notebook.assign_ids), the line
# otter puts after each question, and the next question's prompt: where
# an answer written in cells below its answer cell ends.
_NOTEBOOK_ID = re.compile(r"(cell|answer|sample)-[a-z0-9]{1,8}")
_SEPARATORS = {"---", "***", "___"}
_PROMPT = re.compile(r"\*\*Q\d{1,3}+\.")
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


def _source(cell: nbformat.NotebookNode) -> str:
    """A cell's text, at most MAX_CELL_CHARS characters (a note says how
    many more there were)."""
    source = cell.get("source", "")
    if isinstance(source, list):   # nbformat joins these; be sure
        source = "".join(str(part) for part in source[:MAX_CELL_CHARS])
    source = str(source)
    cut = len(source) - MAX_CELL_CHARS
    if cut > 0:
        source = (source[:MAX_CELL_CHARS]
                  + f"\n[... {cut} more characters in this cell not read]")
    return source


def _prefix(source: str) -> re.Match[str] | None:
    """The ``**Answer Qn:**`` prefix at the start of ``source`` (linear:
    one strip, then a bounded window)."""
    head = source.lstrip()[:PREFIX_WINDOW]
    return _PREFIX.match(head)


def _cell_question(cell: nbformat.NotebookNode,
                   asked: tuple[str, ...]) -> str | None:
    meta = cell.get("metadata", {}).get("kit", {})
    if isinstance(meta, dict) and meta.get("sample"):
        return None  # the staff sample answer (master notebook only)
    if isinstance(meta, dict) and str(meta.get("question", "")) \
            in asked:
        return str(meta["question"])
    match = _prefix(_source(cell))
    if match and match.group(1).upper() in asked:
        return match.group(1).upper()
    return None


def _answer_text(source: str) -> str:
    """The student's words: the cell without its ``**Answer Qn:**`` prefix
    and without untouched placeholder text."""
    match = _prefix(source)
    text = source.lstrip()[match.end():] if match else source
    text = text.strip()
    return "" if text.lower() in _PLACEHOLDERS else text


def _ends_answer(cell: nbformat.NotebookNode) -> bool:
    """Whether ``cell``, below an answer cell, is no longer the answer:
    a marked cell (question or sample), code or raw, a cell of the
    notebook itself, otter's ``---`` line or the next question's prompt."""
    if cell.get("cell_type") != "markdown":
        return True
    meta = cell.get("metadata", {}).get("kit")
    if meta:
        return True
    if _NOTEBOOK_ID.fullmatch(str(cell.get("id") or "")):
        return True
    head = _source(cell).lstrip()[:PREFIX_WINDOW]
    return head.rstrip() in _SEPARATORS or bool(_PREFIX.match(head)) \
        or bool(_PROMPT.match(head))


def read_notebook(path: Path | str, asked: tuple[str, ...] | None = None
                  ) -> nbformat.NotebookNode | dict:
    """The notebook at ``path``; AnswersError if missing, larger than
    MAX_NOTEBOOK_BYTES or unreadable (``asked``: the questions it holds,
    default the homework in use's)."""
    path = Path(path)
    if not path.is_file():
        asked = asked or questions()
        raise AnswersError(f"notebook not found: {path.name} is not in the "
                           f"submission, so the inline answers "
                           f"{asked[0]}-{asked[-1]} cannot be collected")
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise AnswersError(f"{path.name} is {size / 1e6:.0f} MB, more "
                           f"than the {MAX_NOTEBOOK_BYTES / 1e6:.0f} MB "
                           f"read for answers: clear the cells' outputs "
                           f"(Kernel > Restart & Clear Output), save and "
                           f"resubmit")
    try:   # only a regular file is opened: a FIFO never blocks it
        text = read_regular_text(path, limit=MAX_NOTEBOOK_BYTES)
    except (OSError, ValueError) as exc:
        raise AnswersError(f"{path.name} is not a readable notebook "
                           f"({type(exc).__name__}: {exc})") from None
    plain = _plain_v4(text)
    if plain is not None:
        return plain
    try:
        import nbformat   # 0.2-2.5 s to import (jsonschema's formats)
        return nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises many types for bad JSON
        raise AnswersError(f"{path.name} is not a readable notebook "
                           f"({type(exc).__name__}: {exc}); save it from "
                           f"Jupyter and resubmit") from exc


def _answer_cells(nb: nbformat.NotebookNode, asked: tuple[str, ...]
                  ) -> list[tuple[str, str, list[str]]]:
    """``(question, text of the answer cell, texts of the cells below it)``
    per answer cell, in notebook order; at most MAX_CELLS cells read."""
    found: list[tuple[str, str, list[str]]] = []
    below: list[str] | None = None
    cells = nb.get("cells", [])
    for cell in cells[:MAX_CELLS] if isinstance(cells, list) else []:
        if cell.get("cell_type") not in ("markdown", "raw", "code"):
            below = None
            continue
        question = _cell_question(cell, asked)
        if question is not None:
            below = []
            found.append((question, _answer_text(_source(cell)), below))
        elif below is not None and not _ends_answer(cell):
            text = _source(cell).strip()
            if text and text.lower() not in _PLACEHOLDERS:
                below.append(text)
        else:
            below = None
    return found


def _plain_v4(text: str) -> dict[str, Any] | None:
    """A well-formed v4 notebook read with json alone (what Jupyter saves),
    sources joined as nbformat joins them; None for anything else, which
    nbformat then reads (older versions, odd cells, bad JSON)."""
    try:
        data = json.loads(text)
    except ValueError:
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


def collect_answers(notebook_path: Path | str,
                    asked: tuple[str, ...] | None = None) -> dict[str, str]:
    """Answer text per question of ``asked`` (default ``questions()``;
    ``""`` if unanswered).

    Several cells marked with the same question are joined in order, so a
    student who split an answer over two cells loses nothing; so are the
    markdown cells a student added below an answer cell (up to the
    notebook's next cell of its own, its ``---`` line or the next
    question). Each answer keeps at most MAX_ANSWER_CHARS characters.
    """
    asked = asked or questions()
    nb = read_notebook(notebook_path, asked)
    parts: dict[str, list[str]] = {q: [] for q in asked}
    for question, text, below in _answer_cells(nb, asked):
        parts[question] += [t for t in (text, *below) if t]
    out = {}
    for question, texts in parts.items():
        text = "\n\n".join(texts)
        cut = len(text) - MAX_ANSWER_CHARS
        if cut > 0:
            text = (text[:MAX_ANSWER_CHARS]
                    + f"\n[... {cut} more characters not read]")
        out[question] = text
    return out


def answered_below(notebook_path: Path | str,
                   asked: tuple[str, ...] | None = None) -> list[str]:
    """Questions whose answer cell is empty while the student wrote in the
    cells below it (collected, but worth a warning before submitting)."""
    asked = asked or questions()
    nb = read_notebook(notebook_path, asked)
    cells = _answer_cells(nb, asked)
    filled = {q for q, text, _ in cells if text}
    return sorted({q for q, text, below in cells
                   if not text and below and q not in filled})


def _quote(text: str) -> str:
    # Student text is data: an escaped blockquote shows it verbatim, and
    # nothing in it (headings, </blockquote>, HTML) can leave the quote.
    return mdsafe.quote(text)


def full_answer_name(name: str) -> str:
    """The file name of one submission's full answer (a question page
    links to it where it cuts the answer): the name's safe characters and
    a hash of the whole name, so two names never share a file and the link
    needs no escaping."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:60].strip("_") or "answer"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")
                            ).hexdigest()[:10]
    return f"{safe}-{digest}.md"


def _full_page(pages_dir: Path, question: str, name: str,
               text: str) -> str:
    """Write ``answers/full/<question>/<name>.md`` (the whole answer,
    escaped like the page) and return its link relative to the page."""
    folder = pages_dir / "full" / question
    folder.mkdir(parents=True, exist_ok=True)
    file_name = full_answer_name(name)
    atomic.write_text(
        folder / file_name,
        f"# {question}: {mdsafe.inline(name, 200)} (full answer)\n\n"
        f"[Back to {question}](../../{question}.md)\n\n"
        + mdsafe.quote(text, MAX_ANSWER_CHARS + 100) + "\n")
    return f"full/{question}/{file_name}"


def write_question_pages(out_dir: Path | str,
                         answers_by_submission: dict[str, dict[str, str]],
                         asked: tuple[str, ...] | None = None
                         ) -> list[Path]:
    """Write ``out_dir/answers/<question>.md`` for each of
    ``questions()``: every submission's answer to that question, in
    submission-name order. An answer longer
    than the page shows (mdsafe.ANSWER_LIMIT) is cut there with a link to
    its full text in ``answers/full/Qn/``. Returns the pages."""
    pages_dir = Path(out_dir) / "answers"
    pages_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(answers_by_submission)
    pages = []
    for question in asked or questions():
        answered = sum(bool(answers_by_submission[n].get(question, "").strip())
                       for n in names)
        lines = [f"# {question}", "",
                 f"{answered} of {len(names)} submissions answered.", ""]
        for name in names:
            text = answers_by_submission[name].get(question, "").strip()
            lines += [f"## {mdsafe.inline(name, 200)}", "",
                      _quote(text) if text else "_(no answer)_", ""]
            if len(text) > mdsafe.ANSWER_LIMIT:
                link = _full_page(pages_dir, question, name, text)
                lines += [f"**Cut at {mdsafe.ANSWER_LIMIT:,} of "
                          f"{len(text):,} characters: [read the full "
                          f"answer]({link})**", ""]
        page = pages_dir / f"{question}.md"
        atomic.write_text(page, "\n".join(lines))
        pages.append(page)
    return pages


def answers_markdown(answers: dict[str, str] | None,
                     error: str = "",
                     asked: tuple[str, ...] | None = None) -> str:
    """A feedback.md section echoing the student's answers (graded by TAs),
    or the reason they could not be read. Never affects the score."""
    lines = ["## Inline answers (graded by hand)", ""]
    if error or answers is None:
        reason = mdsafe.inline(error or "no notebook")
        lines.append(f"Could not read your answers: {reason}. This "
                     f"does not change your code score; the questions are "
                     f"scored from your notebook's answers, and none were "
                     f"read.")
        return "\n".join(lines) + "\n"
    for question in asked or questions():
        text = answers.get(question, "").strip()
        lines += [f"**{question}**", "",
                  _quote(text) if text else "_(no answer)_", ""]
        if len(text) > mdsafe.ANSWER_LIMIT:
            lines += ["_(Cut here; the TAs read your whole answer.)_", ""]
    return "\n".join(lines)
