"""Inline answers: collection from notebooks and the per-question pages."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from autograder.submission.answers import (QUESTIONS, AnswersError,
                                           collect_answers,
                                           write_question_pages)


def _answer_cell(question: str, text: str, *, meta: bool = True,
                 prefix: bool = True) -> nbformat.NotebookNode:
    source = (f"**Answer {question}:** " if prefix else "") + text
    cell = nbformat.v4.new_markdown_cell(source)
    if meta:
        cell.metadata["kit"] = {"question": question}
    return cell


def _write(path: Path, cells: list) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Attention"),
                nbformat.v4.new_code_cell("x = 1")] + cells
    nbformat.write(nb, str(path))
    return path


def test_collects_each_question_and_strips_prefix(tmp_path):
    path = _write(tmp_path / "a.ipynb", [
        _answer_cell("Q1", "Scaling keeps the softmax from saturating."),
        _answer_cell("Q2", "Because **heads** see subspaces.\n\nTwo paras."),
        _answer_cell("Q3", "_Type your answer here, replacing this text._"),
        _answer_cell("Q4", ""),
    ])
    answers = collect_answers(path)
    assert list(answers) == list(QUESTIONS)
    assert answers["Q1"] == "Scaling keeps the softmax from saturating."
    assert answers["Q2"] == "Because **heads** see subspaces.\n\nTwo paras."
    # untouched placeholder, empty cell and missing cell: all unanswered
    assert answers["Q3"] == answers["Q4"] == answers["Q5"] == ""


def test_either_mark_is_enough_and_split_answers_join(tmp_path):
    path = _write(tmp_path / "a.ipynb", [
        _answer_cell("Q1", "metadata only", prefix=False),
        _answer_cell("Q2", "prefix only", meta=False),
        _answer_cell("Q5", "first part"),
        # otter's line after a question ends it: what follows is not an
        # answer (cells right below an answer cell are: test_reflected_text)
        nbformat.v4.new_markdown_cell("---"),
        nbformat.v4.new_markdown_cell("unrelated text"),
        _answer_cell("Q5", "second part", prefix=False),
    ])
    answers = collect_answers(path)
    assert answers["Q1"] == "metadata only"
    assert answers["Q2"] == "prefix only"
    assert answers["Q5"] == "first part\n\nsecond part"


def test_unmarked_and_sample_cells_are_not_answers(tmp_path):
    sample = _answer_cell("Q3", "staff sample answer")
    sample.metadata["kit"]["sample"] = True
    prose = nbformat.v4.new_markdown_cell(
        "Q1: what is attention? Answer Q1 in the cell below.")
    path = _write(tmp_path / "a.ipynb", [sample, prose])
    assert collect_answers(path) == {q: "" for q in QUESTIONS}


def test_missing_and_broken_notebooks_raise_answers_error(tmp_path):
    with pytest.raises(AnswersError, match="not found"):
        collect_answers(tmp_path / "absent.ipynb")
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    with pytest.raises(AnswersError, match="not a readable notebook"):
        collect_answers(broken)


def test_question_pages_list_every_submission(tmp_path):
    pages = write_question_pages(tmp_path, {
        "bob": {"Q1": "## my heading\nline two", "Q2": ""},
        "alice": {"Q1": "softmax saturates", "Q2": "heads"},
    })
    assert [p.name for p in pages] == [f"{q}.md" for q in QUESTIONS]
    q1 = (tmp_path / "answers" / "Q1.md").read_text()
    assert "2 of 2 submissions answered." in q1
    # sorted by submission, answers quoted so their headings stay inside
    assert q1.index("## alice") < q1.index("## bob")
    assert "> \\## my heading  \n> line two" in q1
    q2 = (tmp_path / "answers" / "Q2.md").read_text()
    assert "1 of 2 submissions answered." in q2
    assert "_(no answer)_" in q2.split("## bob")[1]
    unanswered = tmp_path / "answers" / f"{QUESTIONS[-1]}.md"
    assert "_(no answer)_" in unanswered.read_text()


def test_answers_markdown_echoes_answers_or_the_error():
    from autograder.submission.answers import answers_markdown
    text = answers_markdown({"Q1": "a\nb", "Q3": ""})
    assert "**Q1**\n\n> a  \n> b" in text
    # Every question of autograder/questions.toml but Q1 is unanswered.
    assert text.count("_(no answer)_") == len(QUESTIONS) - 1, \
        f"one '_(no answer)_' per question of {QUESTIONS} but Q1"
    failed = answers_markdown(None, error="attention.ipynb is not readable")
    assert "attention.ipynb is not readable" in failed
    assert "does not change your code score" in failed


def test_a_submission_without_answers_is_on_every_page(tmp_path):
    from autograder import graded_folder
    graded_folder._write_question_pages(
        {"alice": {"Q1": "softmax saturates"}, "frank": {}}, tmp_path)
    for question in QUESTIONS:
        page = (tmp_path / "answers" / f"{question}.md").read_text()
        assert "_(no answer)_" in page.split("## frank")[1]
    # A batch where nobody answered anything (code only): no pages.
    graded_folder._write_question_pages({"a": {}, "b": {}},
                                        tmp_path / "code")
    assert not (tmp_path / "code" / "answers").exists()
