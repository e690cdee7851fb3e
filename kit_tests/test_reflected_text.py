"""Hostile input: every reflected string escaped, CSV cells that cannot
start a formula, answers parsed in linear time, answers complete for the
TA.

One real ``grade`` run of a Gradescope export whose submitters' names are
spreadsheet formulas, and whose first submission is the catalogue entry
``escape/type_name_markup`` (a type ``__name__`` holding a heading, an
image beacon, ``<img onerror>``, a ``javascript:`` link and invisible
characters) with a notebook of hostile answers. The tests read the files
that run wrote: feedback.md, results.json, feedback.html, the answer
pages, report.html, grades.csv and gradescope_scores.csv.
"""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

from autograder.submission import answers
from autograder.report import layout
from autograder.text import csvsafe, mdsafe
from kit import variants

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
# Render as the most permissive CommonMark renderer would (raw HTML on).
RENDER = MarkdownIt("commonmark", {"html": True}).render
INVISIBLE = ["\u202e", "\u2062", "\u2063", "\u2064", "\U000e0041", "\u00ad",
             "\u061c", "\u200b", "\u3164", "\u115f"]
MARKUP = ("# heading ![x](http://beacon.invalid/a.png) "
          "<img src=x onerror=alert(1)> [link](javascript:alert(1))")
CSV_NAMES = ['=HYPERLINK("http://x")', "+1", "-2", "@SUM(1)", "\tx", "\rx"]
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
LONG_TAIL = "END-OF-THE-LONG-ANSWER"
LONG = ("attention " * 2500)[:24_970] + LONG_TAIL      # 25,000 characters
BELOW = "my answer to Q2, written in a new cell under the answer cell"
CRAFTED = "**Answer Q3" + " " * 100_000 + "x"            # the old regex: 30 s


def sub101(out: Path) -> Path:
    """The graded folder of the hostile submission."""
    return layout.submission_dir(out, "submission_101")


def _yaml(text: str) -> str:
    return json.dumps(text)     # a JSON string is a YAML double-quoted one


METADATA = f"""\
submission_101:
  :submitters:
  - :name: {_yaml(CSV_NAMES[0])}
    :sid: {_yaml(CSV_NAMES[1])}
    :email: {_yaml(CSV_NAMES[2])}
  - :name: {_yaml(CSV_NAMES[3])}
    :sid: {_yaml(CSV_NAMES[4])}
    :email: {_yaml(CSV_NAMES[5])}
submission_102:
  :submitters:
  - :name: "'quoted"
    :sid: "-3"
    :email: ada@example.edu
"""


def _cell(source: str, question: str | None = None):
    cell = nbformat.v4.new_markdown_cell(source)
    if question:
        cell.metadata["kit"] = {"question": question}
    return cell


def _hostile_notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("**Q1.** Why scale?"),
        _cell("**Answer Q1:** looks " + "".join(INVISIBLE) + " fine\n\n"
              + MARKUP, "Q1"),
        _cell("---"),
        _cell("**Answer Q2:**\n\n_Type your answer here, replacing this "
              "text._", "Q2"),
        _cell(BELOW),
        _cell("---"),
        _cell(CRAFTED),
        _cell("**Answer Q4:** " + LONG, "Q4"),
        _cell("---"),
        _cell("**Answer Q5:** </blockquote>\n\n## forged\n\n"
              "<script>alert(5)</script>", "Q5"),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    """The export graded by the CLI; returns OUT."""
    export = tmp_path_factory.mktemp("export") / "assignment_7_export"
    first = export / "submission_101"
    (first / "transformer_lm").mkdir(parents=True)
    (first / "transformer_lm" / "modeling_attention.py").write_text(
        variants.find("escape/type_name_markup").source())
    _hostile_notebook(first / "assignment" / "attention.ipynb")
    second = export / "submission_102" / "transformer_lm"
    second.mkdir(parents=True)
    (second / "modeling_attention.py").write_text(REFERENCE.read_text())
    (export / "submission_metadata.yml").write_text(METADATA)
    out = tmp_path_factory.mktemp("out")
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", "--timeout", "5", str(export)],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "report.html").is_file(), done.stdout + done.stderr
    return out


class Page(HTMLParser):
    """Every start tag with its attributes, and the text, of a page."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data):
        self.text.append(data)


def _no_student_markup(text: str, where: str) -> None:
    """No tag of the student's: nothing loads from the network, nothing
    runs, no heading of the student's, no link leaves the folder."""
    page = Page(text)
    for tag, attrs in page.tags:
        assert tag not in ("img", "iframe", "object", "embed"), where
        assert not [a for a in attrs if a.startswith("on")], (where, tag)
        assert "src" not in attrs, (where, tag)
        href = attrs.get("href", "")
        assert ":" not in href and not href.startswith("/"), (where, href)
    headings = [t for t in page.text if "heading" in t]
    assert all("beacon" in t for t in headings), where   # shown as text
    for tag, _ in page.tags:
        assert tag != "script" or where.endswith("report.html"), where


def _no_invisible(text: str, where: str) -> None:
    found = sorted({f"U+{ord(c):04X}" for c in text if c in INVISIBLE})
    assert not found, (where, found)


# --------------------------------------------------------------------------
# Markdown and HTML

@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_feedback_and_results_json_show_the_type_name_as_text(graded):
    feedback = (sub101(graded) / "feedback.md").read_text()
    data = json.loads((sub101(graded) / "results.json")
                      .read_text())
    outputs = [data["output"], *(t["output"] for t in data["tests"])]
    item = next(t for t in data["tests"] if t.get("number") == "1.1")
    assert item["score"] == 0
    for text, where in [(feedback, "feedback.md"), *(
            (o, "results.json") for o in outputs)]:
        _no_invisible(text, where)
        html = RENDER(text)
        _no_student_markup(html, where)
        assert not re.search(r"<h\d>[^<]*heading", html), where
    for text in (feedback, item["output"]):
        assert "is a `# heading <U+202E><U+2062><U+E0041><U+00AD> " in text


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_html_pages_load_nothing_and_hide_nothing(graded):
    pages = [graded / "report.html",
             *graded.glob("submissions/*/feedback.html"),
             *graded.glob("answers/*.html"),
             *graded.glob("answers/full/*/*.html")]
    assert sub101(graded) / "feedback.html" in pages
    assert len(list(graded.glob("answers/full/*/*.html"))) == 1
    for page in pages:
        text = page.read_text()
        _no_invisible(text, str(page))
        _no_student_markup(text, str(page))
    feedback = (sub101(graded) / "feedback.html").read_text()
    assert "&lt;U+2062&gt;" in feedback
    assert "beacon.invalid" in feedback        # shown, as text
    report = (graded / "report.html").read_text()
    for tag, attrs in Page(report).tags:
        assert tag != "script" or "src" not in attrs


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_answer_pages_write_invisible_characters_out(graded):
    q1 = (graded / "answers" / "Q1.md").read_text()
    _no_invisible(q1, "Q1.md")
    for char in INVISIBLE:
        assert mdsafe.inline(mdsafe.visible(char)) in q1, char
    html = (graded / "answers" / "Q1.html").read_text()
    assert "&lt;U+E0041&gt;" in html and "&lt;U+3164&gt;" in html
    q5 = RENDER((graded / "answers" / "Q5.md").read_text())
    assert "<script>" not in q5 and "<h2>forged</h2>" not in q5


# --------------------------------------------------------------------------
# Answers complete for the TA

@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_a_cut_answer_links_its_full_text(graded):
    page = (graded / "answers" / "Q4.md").read_text()
    assert LONG_TAIL not in page                   # cut on the page ...
    link = re.search(r"\[read the full answer\]\((full/Q4/[A-Za-z0-9_-]+"
                     r"\.md)\)", page)
    assert link, page[-2000:]
    full = (graded / "answers" / link.group(1)).read_text()
    assert LONG_TAIL.replace("-", "\\-") in full or LONG_TAIL in full
    assert full.count("attention") >= 2497        # ... whole behind it
    rendered = (graded / "answers" / "Q4.html").read_text()
    href = link.group(1)[:-3] + ".html"
    assert f'href="{href}"' in rendered
    assert (graded / "answers" / href).is_file()


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_an_answer_below_its_empty_answer_cell_is_collected(graded):
    page = (graded / "answers" / "Q2.md").read_text()
    section = page.split("## submission_101")[1].split("## ")[0]
    assert "(no answer)" not in section
    assert mdsafe.inline(BELOW) in section


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_a_crafted_prefix_cell_does_not_stall_the_batch(graded):
    # The crafted cell carries no question: it is no answer, and the run
    # finished (the fixture); Q3 is unanswered.
    page = (graded / "answers" / "Q3.md").read_text()
    assert re.search(r"\n0 of \d submissions answered\.", page)


class Recording:
    """A compiled pattern that records the length of every string it is
    applied to."""

    def __init__(self, pattern: re.Pattern, seen: list[int]):
        self.pattern, self.seen = pattern, seen

    def __getattr__(self, name):
        method = getattr(self.pattern, name)

        def call(text, *args, **kwargs):
            self.seen.append(len(text))
            return method(text, *args, **kwargs)
        return call


@pytest.mark.parametrize("size", [10_000, 1_000_000])
def test_answers_regexes_see_bounded_text_whatever_the_cell(
        tmp_path, monkeypatch, size):
    """Linear by construction: a cell of any size is stripped once (linear)
    and every pattern sees at most PREFIX_WINDOW characters of it, so the
    regex work per cell is a constant (10 kB and 1 MB cells alike)."""
    seen: list[int] = []
    for name in ("_PREFIX", "_PROMPT", "_NOTEBOOK_ID"):
        monkeypatch.setattr(answers, name,
                            Recording(getattr(answers, name), seen))
    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell("**Answer Q1:** short", "Q1"), _cell("---"),
                _cell("**Answer Q2" + " " * size + "x"),
                _cell("**Answer Q3:" + " " * size + "**  real", "Q3"),
                _cell("#" + " " * size + "heading below Q3")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, str(path))
    found = answers.collect_answers(path)
    assert found["Q1"] == "short" and found["Q2"] == ""
    assert found["Q3"].startswith("**Answer Q3:")   # prefix not in window
    assert "\n\n#" in found["Q3"]                  # the cell below
    assert found["Q3"].endswith("heading below Q3") == (size < 100_000)
    assert seen and max(seen) <= answers.PREFIX_WINDOW


def test_answers_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(answers, "MAX_CELL_CHARS", 1000)
    monkeypatch.setattr(answers, "MAX_ANSWER_CHARS", 1500)
    monkeypatch.setattr(answers, "MAX_CELLS", 3)
    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell("**Answer Q1:** " + "a" * 5000, "Q1"),
                _cell("b" * 5000),
                _cell("c" * 10),
                _cell("**Answer Q2:** beyond the cells read", "Q2")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, str(path))
    found = answers.collect_answers(path)
    assert found["Q2"] == ""
    assert found["Q1"].endswith("more characters not read]")
    assert len(found["Q1"]) < 1600 and "c" * 10 not in found["Q1"]
    monkeypatch.setattr(answers, "MAX_NOTEBOOK_BYTES", 100)
    with pytest.raises(answers.AnswersError, match="clear the cells"):
        answers.collect_answers(path)


def test_make_submission_warns_about_an_answer_below_an_empty_cell(
        tmp_path):
    sys.path.insert(0, str(ROOT / "kit" / "student"))
    try:
        import make_submission
    finally:
        sys.path.pop(0)
    _hostile_notebook(tmp_path / make_submission.NOTEBOOK)
    assert make_submission.answered_below(tmp_path) == ["Q2"]
    nb = nbformat.read(str(tmp_path / make_submission.NOTEBOOK), 4)
    nb.cells[3].source = "**Answer Q2:** moved here"
    nbformat.write(nb, str(tmp_path / make_submission.NOTEBOOK))
    assert make_submission.answered_below(tmp_path) == []


# --------------------------------------------------------------------------
# CSV

def _raw_cells(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_no_csv_cell_starts_a_formula(graded):
    for name in ("grades.csv", "gradescope_scores.csv"):
        rows = _raw_cells(graded / name)
        assert len(rows) >= 3, name
        for row in rows:
            for value in row:
                assert not value.startswith(FORMULA_START), (name, value)


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_csv_names_read_back_exactly_and_scores_stay_numbers(graded):
    scores = csvsafe.read_rows(graded / "gradescope_scores.csv")
    header, body = scores[0], scores[1:]
    names = {row[header.index("Name")] for row in body}
    sids = {row[header.index("SID")] for row in body}
    emails = {row[header.index("Email")] for row in body}
    assert names == {CSV_NAMES[0], CSV_NAMES[3], "'quoted"}
    assert sids == {CSV_NAMES[1], CSV_NAMES[4], "-3"}
    assert emails == {CSV_NAMES[2], CSV_NAMES[5], "ada@example.edu"}
    for row in body:
        float(row[header.index("Score")])
    header, rows = csvsafe.read_dicts(graded / "grades.csv")
    first = next(r for r in rows if r["submission"] == "submission_101")
    assert first["name"] == f"{CSV_NAMES[0]}; {CSV_NAMES[3]}"
    raw = _raw_cells(graded / "grades.csv")
    assert all(re.fullmatch(r"\d+(\.\d+)?", row[raw[0].index("score")])
               for row in raw[1:])
    # the export's folder each was graded from, after the Gradescope
    # columns and the scores
    assert header[-1] == "path" and first["path"].endswith(
        "/assignment_7_export/submission_101")


@pytest.mark.e2e   # the CLI in its own process (make test-all)
def test_class_report_reads_the_neutralised_names_back(graded):
    report = (graded / "report.html").read_text()
    text = "".join(Page(report).text)
    assert "=HYPERLINK(\"http://x\"); @SUM(1)" in text
    assert "'=HYPERLINK" not in text


@pytest.mark.parametrize("value", CSV_NAMES + ["'x", "''=y", "plain",
                                               "", "a=b"])
def test_csv_cell_round_trip(tmp_path, value):
    path = tmp_path / "t.csv"
    csvsafe.write_rows(path, [["name", "score"], [value, -1.5]])
    raw = _raw_cells(path)[1]
    assert not raw[0].startswith(FORMULA_START)
    assert raw[1] == "-1.5"                      # a number stays a number
    assert csvsafe.read_rows(path)[1] == [value, "-1.5"]


# A path as a grader may give it: newlines, commas, a formula start, control
# and invisible characters, bytes that are not UTF-8, and 10,000 characters.
HOSTILE_PATHS = ["=cmd|' /C calc'!A0,\n,x.py", "-2\r\n\"q\",.py",
                 "subs/ev" + os.fsdecode(b"\xff") + "il\x01\x1b[31m\u202e",
                 "subs/" + "y" * 10_000 + ".py", "+1", "1e5"]


def test_grades_csv_names_each_path_as_given_on_one_safe_line(tmp_path):
    from autograder.report import results
    names = [f"s{i}" for i in range(len(HOSTILE_PATHS))]
    rows = [{"name": n, "score": 1.0, "max_score": 2.0, "tasks": {"t": 1.0},
             "note": ""} for n in names]
    path = tmp_path / "grades.csv"
    results.write_grades_csv(rows, ["t"], path,
                             dict(zip(names, HOSTILE_PATHS)))
    raw = _raw_cells(path)
    assert raw[0] == ["submission", "score", "max_score", "t", "path"]
    assert [r[0] for r in raw[1:]] == names      # one row per submission
    assert len(path.read_text().splitlines()) == len(names) + 1
    for row in raw[1:]:
        assert not row[-1].startswith(FORMULA_START), row[-1]
        assert len(row[-1]) <= 8 * results.PATH_CHARS + 3
    shown = [r["path"] for r in csvsafe.read_dicts(path)[1]]
    assert shown[0] == "=cmd|' /C calc'!A0,<U+000A>,x.py"   # read back
    assert shown[1] == "-2<U+000D><U+000A>\"q\",.py"
    assert shown[2] == "subs/ev\ufffdil<U+0001><U+001B>[31m<U+202E>"
    assert shown[3] == ("subs/" + "y" * 10_000)[:results.PATH_CHARS] + "..."
    assert shown[4:] == ["+1", "1e5"]            # text, never a number
    assert raw[5][-1] == "'+1"


def test_grades_csv_without_paths_keeps_its_columns(tmp_path):
    from autograder.report import results
    path = tmp_path / "grades.csv"
    results.write_grades_csv([{"name": "a", "score": 0.0, "max_score": 2.0,
                               "tasks": {}, "note": ""}], ["t"], path)
    assert _raw_cells(path) == [["submission", "score", "max_score", "t"],
                                ["a", "0", "2", "0"]]


# --------------------------------------------------------------------------
# The seam itself

def test_every_format_character_is_written_out():
    chars = [chr(c) for c in range(0x110000)
             if unicodedata.category(chr(c)) == "Cf"]
    chars += ["\u3164", "\u115f", "\u2028"]
    assert "\U000e0041" in chars and "\u00ad" in chars
    text = mdsafe.clean("".join(chars), 10 ** 6)
    assert text == "".join(mdsafe.visible(c) for c in chars)
    assert not any(unicodedata.category(c) in ("Cf", "Cc") for c in text)


def test_attribute_names_and_types_in_module_size_are_escaped():
    from autograder import homework
    from autograder.checks.kinds import register_homework_kinds
    size = register_homework_kinds(homework.current())["size"]
    shown = size._describe({"type": "<img src=x onerror=alert(1)>",
                            "value": "`![x](http://b)`"})
    html = RENDER("- " + shown)
    assert "<img" not in html and "<code>" in html


def test_every_csv_the_grader_writes_goes_through_csvsafe():
    """One writer: no module of the grader or the kit opens a csv writer
    of its own (it would skip the formula neutralisation)."""
    offenders = []
    for path in [*(ROOT / "autograder").rglob("*.py"),
                 *(ROOT / "kit").rglob("*.py")]:
        if path.name == "csvsafe.py":
            continue
        if re.search(r"csv\.(writer|DictWriter)\(", path.read_text()):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
