"""Student text is data: hostile answers, printed output
and exception messages render verbatim and change nothing around them, in
the TAs' answer pages, feedback.md and results.json. Rendered with a
CommonMark renderer that passes raw HTML through (the worst case)."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

from autograder.report import results as report
from autograder.text import mdsafe
from autograder.submission.answers import (answers_markdown, collect_answers,
                                           write_question_pages)
from autograder.grade import CheckResult, GradeResult, TaskResult
from autograder.probes import failure_text
from autograder.sandbox.protocol import ERROR, Probe, ProbeResult
from autograder.rubric import Outcome, load_rubric

RENDER = MarkdownIt("commonmark", {"html": True}).render

FORGED = ("fine answer\n</blockquote>\n\n## alice\n\n> alice's forged "
          "answer\n\n<blockquote>")
HTML = ('<script>alert(1)</script><img src=x onerror="alert(2)">'
        '<a href="javascript:alert(3)">x</a>')
FENCE = "```\n# not in the code block\n```\n~~~\n<b>bold</b>"
CONTROL = "a\x00b\x1b[31mred\x07\u202egnp.exe\u200bend\rnext"
HOSTILE = [FORGED, HTML, FENCE, CONTROL,
           "- [ ] list\n1. one\n===\n---\n| a | b |\n|---|---|",
           "**bold** _em_ [link](http://x) &amp; &#60;script&#62;"]


class Tags(HTMLParser):
    """Every start tag and attribute of a rendered page."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]


def _no_student_markup(html: str, allowed: set[str]) -> None:
    tags = Tags(html)
    assert set(tags.tags) <= allowed, html
    assert not {"onerror", "src", "href"} & set(tags.attrs), html


# --------------------------------------------------------------------------
# The helpers

@pytest.mark.parametrize("text", HOSTILE)
def test_inline_renders_literally_as_one_paragraph(text):
    html = RENDER("Before: " + mdsafe.inline(text))
    _no_student_markup(html, {"p", "br"})
    shown = re.sub(r"<[^>]+>", "", html)
    # every visible (non-control) character of the student's text survives
    for word in re.findall(r"[A-Za-z]{3,}", text.replace("\x1b[31m", " ")):
        assert word in shown


@pytest.mark.parametrize("text", HOSTILE)
def test_quote_stays_one_blockquote(text):
    html = RENDER("# Page\n\n" + mdsafe.quote(text) + "\n\n## next")
    _no_student_markup(html, {"h1", "h2", "blockquote", "p", "br"})
    assert Tags(html).tags.count("blockquote") == 1
    assert Tags(html).tags.count("h2") == 1


@pytest.mark.parametrize("text", HOSTILE + ["`` ``` ```` `````"])
def test_code_block_cannot_be_closed_from_inside(text):
    html = RENDER(mdsafe.code_block(text) + "\n\nafter")
    assert Tags(html).tags == ["pre", "code", "p"], html
    assert "<script>" not in html


def test_code_span_cannot_be_closed_from_inside():
    html = RENDER("x " + mdsafe.code_span("a ` <b>b</b> `` c") + " y")
    assert Tags(html).tags == ["p", "code"]


def test_control_and_invisible_characters_are_replaced():
    text = mdsafe.clean(CONTROL, 1000)
    assert not any(ord(c) < 32 and c != "\n" for c in text)
    assert "\u202e" not in text and "\u200b" not in text
    # controls are U+FFFD; invisible ones are named
    assert text.count("\ufffd") == 3 and text.endswith("end\nnext")
    assert "<U+202E>gnp.exe<U+200B>end" in text


def test_long_text_is_bounded_and_says_so():
    text = mdsafe.quote("x" * 1_000_000)
    assert len(text) < mdsafe.ANSWER_LIMIT + 100
    assert f"{1_000_000 - mdsafe.ANSWER_LIMIT} more characters" in text
    block = mdsafe.code_block("y\n" * 100_000)
    assert len(block) < mdsafe.OUTPUT_LIMIT + 100


# --------------------------------------------------------------------------
# The pages that show student text

def _notebook(path, answers: dict[str, str]):
    nb = nbformat.v4.new_notebook()
    for question, text in answers.items():
        cell = nbformat.v4.new_markdown_cell(f"**Answer {question}:** {text}")
        cell.metadata["kit"] = {"question": question}
        nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


def test_a_forged_answer_cannot_add_a_submission_to_the_ta_page(tmp_path):
    bob = collect_answers(_notebook(tmp_path / "bob.ipynb",
                                    {"Q1": FORGED + "\n" + HTML}))
    write_question_pages(tmp_path, {"bob": bob,
                                    "carol": {"Q1": "softmax saturates"}})
    html = RENDER((tmp_path / "answers" / "Q1.md").read_text())
    tags = Tags(html)
    # one h1 (the question), one h2 per submission: no forged "alice"
    assert tags.tags.count("h2") == 2, html
    assert re.findall(r"<h2>(.*?)</h2>", html) == ["bob", "carol"]
    _no_student_markup(html, {"h1", "h2", "blockquote", "p", "br", "em"})
    assert "alice" in html  # the text is shown, as text


def test_feedback_answers_section_is_escaped():
    html = RENDER(answers_markdown({"Q1": FORGED, "Q2": HTML, "Q3": FENCE}))
    _no_student_markup(html, {"h2", "blockquote", "p", "br", "strong",
                              "em"})
    assert Tags(html).tags.count("h2") == 1


def _graded(stdout: str, answers: dict[str, str]) -> GradeResult:
    rubric = load_rubric()
    task = rubric.tasks[0]
    items = [CheckResult(c, Outcome(c.points, True, ["- ok"]), c.points)
             for c in task.items]
    grade = GradeResult.of(rubric, "bob", "bob.py",
                           tasks=[TaskResult(task, items, [], [])],
                           stdout=stdout)
    grade.answers = answers_markdown(answers)
    return grade


def test_results_json_and_feedback_show_output_and_answers_as_data():
    grade = _graded(FENCE + "\n" + HTML + "\n" + CONTROL,
                    {"Q1": FORGED, "Q2": HTML})
    data = report.results_json(grade)
    html = RENDER(data["output"])
    allowed = {"p", "strong", "ul", "li", "pre", "code", "h2", "blockquote",
               "br", "em"}
    _no_student_markup(html, allowed)
    assert Tags(html).tags.count("pre") == 1      # the output, one block
    assert Tags(html).tags.count("h2") == 1       # "Inline answers" only
    assert "\x1b" not in data["output"] and "\x00" not in data["output"]
    feedback = RENDER(report.feedback_markdown(grade))
    _no_student_markup(feedback, allowed | {"h1", "h3"})
    assert "<h2>alice</h2>" not in feedback


def test_exception_messages_from_the_submission_are_escaped():
    probe = Probe(id="sa_course:eval:x", cls="SelfAttention", init={})
    result = ProbeResult(probe.id, ERROR, "ValueError: </li></ul>\n# owned"
                         "\n" + HTML, phase="call", exception="ValueError")
    html = RENDER("- ✘ public case: " + failure_text(result, probe))
    _no_student_markup(html, {"ul", "li", "br"})
    assert "<h1>" not in html


def test_terminal_preview_shows_quoted_text_without_escapes():
    # `make check` prints markdown lines: the backslashes that escape a
    # message for markdown are dropped there.
    line = "- " + mdsafe.inline("ValueError: a * b [x] <y>")
    assert report._plain(line) == "- ValueError: a * b [x] <y>"


def test_shape_comment_messages_quote_the_comment_as_code():
    from autograder import homework
    from autograder.checks.shape_comments import check_shape_comments
    from autograder.checks.shape_notation import notation_of
    from kit_tests.rubrics import live_task_methods
    source = (Path(__file__).resolve().parents[1] / "solutions" /
              "transformer_lm" / "modeling_attention.py").read_text()
    line = "        return probs @ v  # [bs, seq, hidden]\n"
    number = source.splitlines(keepends=True).index(line) + 1
    hostile = source.replace(line, "        return probs @ v  # [bs, seq, "
                             "`<img src=x onerror=alert(1)>`]\n")
    issues = check_shape_comments(hostile, {number: [[[2, 3, 4]]]},
                                  {"batch_size": 2, "seq_len": 3,
                                   "hidden": 4, "input_size": 5},
                                  live_task_methods(),
                                  notation=notation_of(homework.current()))
    assert issues
    for issue in issues:
        html = RENDER("- " + issue.message)
        _no_student_markup(html, {"ul", "li", "code"})
