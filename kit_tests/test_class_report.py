"""The class report: ``grade`` writes OUT/report.html from
its own outputs, ``python -m autograder report OUT`` rewrites it. Checked
as data (what each section lists) and as a person sees it: headless
Chromium renders it (screenshot, charts, tables, sorting and filtering, no
console error). CI installs Debian's ``chromium`` (.ci/run); without it the
browser tests skip and say why."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from autograder.report.layout import submission_dir
from autograder.staff import anonymise, class_report
from autograder.submission.locate import submission_name
from autograder.text import csvsafe
from kit import variants
from kit.corpus.examples import example_sources

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "transformer_lm" / "modeling_attention.py"
# file name -> entry of the variant catalogue (kit/variants/)
VARIANTS = {"pep8_violation": "diagnoses/pep8_violation",
            "hostile_infinite_loop": "hostile/infinite_loop_sa",
            "syntax_error": "examples/syntax_error"}
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
EVIL = submission_name(Path(HOSTILE_NAME))   # names are sanitised
HOSTILE_ANSWER = ("</blockquote>\n\n## alice\n\n<script>alert(2)</script>"
                  "<img src=y onerror=alert(3)>")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed here "
    "(apt-get install -y chromium; .ci/run installs it in CI)")


def _notebook(path: Path, answers: dict[str, str]) -> None:
    nb = nbformat.v4.new_notebook()
    for question, text in answers.items():
        cell = nbformat.v4.new_markdown_cell(f"**Answer {question}:** {text}")
        cell.metadata["kit"] = {"question": question}
        nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, str]:
    """A small batch graded by the CLI: the reference (with a notebook),
    three catalogued mistakes, a PEP 8 deduction, an infinite loop, a
    syntax error, a stray file and a submission with a hostile name and
    hostile answers."""
    subs = tmp_path_factory.mktemp("subs")
    examples = example_sources()
    for name in ("mask_diagonal", "no_scale", "softmax_wrong_axis"):
        (subs / f"{name}.py").write_text(examples[name])
    for name, key in VARIANTS.items():
        (subs / f"{name}.py").write_text(variants.find(key).source())
    ref = subs / "reference"
    (ref / "transformer_lm").mkdir(parents=True)
    shutil.copy2(REFERENCE, ref / "transformer_lm" / "modeling_attention.py")
    _notebook(ref / "assignment" / "attention.ipynb",
              {"Q1": "Scaling keeps the softmax soft.", "Q2": "Heads."})
    evil = subs / HOSTILE_NAME
    (evil / "transformer_lm").mkdir(parents=True)
    (evil / "transformer_lm" / "modeling_attention.py").write_text(
        examples["no_scale"])
    _notebook(evil / "assignment" / "attention.ipynb",
              {"Q1": HOSTILE_ANSWER, "Q2": "fine"})
    (subs / "notes.txt").write_text("not a submission")
    out = tmp_path_factory.mktemp("out")
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", "--timeout", "3",
         *sorted(str(p) for p in subs.iterdir())],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


class Page(HTMLParser):
    """Tags, attributes and text of a page."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def all(self, tag: str) -> list[dict[str, str]]:
        """The attributes of every ``tag``."""
        return [a for t, a in self.tags if t == tag]


def _report(out: Path) -> str:
    return (out / class_report.REPORT_NAME).read_text()


# --------------------------------------------------------------------------
# What the page says

def test_grade_writes_the_report_and_its_linked_pages(graded):
    out, stdout = graded
    assert f"class report: {out / 'report.html'}" in stdout
    for name in ("reference", "mask_diagonal", EVIL):
        assert (submission_dir(out, name) / "feedback.html").is_file()
    assert (out / "answers" / "Q1.html").is_file()


def test_every_link_works_from_disk_and_nothing_is_fetched(graded):
    out, _ = graded
    page = Page(_report(out))
    hrefs = [a["href"] for a in page.all("a")]
    assert any(h.endswith("feedback.html") for h in hrefs)
    assert "answers/Q1.html" in hrefs
    from urllib.parse import unquote
    for href in hrefs:
        if href.startswith("#"):
            continue
        assert "://" not in href and (out / unquote(href)).is_file(), href
    # self-contained: no external script, style, image or font
    for tag in ("script", "link", "img", "iframe"):
        assert not [a for a in page.all(tag) if a.get("src") or
                    a.get("href")], tag


def test_mistakes_are_ranked_with_explanation_and_submissions(graded):
    out, _ = graded
    batch = class_report.read_batch(out)
    ranked = dict(class_report.ranked_mistakes(batch))
    assert sorted(ranked["no_scale"]) == sorted([EVIL, "no_scale"])
    assert ranked["mask_diagonal"] == ["mask_diagonal"]
    assert list(ranked)[0] == "no_scale"          # two submissions: first
    text = _report(out)
    section = text.split("id='mistakes'")[1].split("</section>")[0]
    from autograder.config import load_mistake_messages
    import html
    assert html.escape(load_mistake_messages()["no_scale"]) in section


def test_limits_grader_failures_and_ungraded_code_are_apart(graded):
    out, _ = graded
    batch = {s.name: s for s in class_report.read_batch(out).submissions}
    assert batch["hostile_infinite_loop"].limits.get("timeout")
    assert not batch["reference"].limits
    stray = batch["notes.txt"]
    assert stray.not_graded and not stray.grader_failure
    assert not any(s.grader_failure for s in batch.values())
    section = _report(out).split("id='failures'")[1].split("</section>")[0]
    loops = section.split("hit a limit")[1].split("<h3>")[0]
    assert "hostile_infinite_loop" in loops and "time limit" in loops
    assert "notes.txt" in section.split("could not be graded")[1]


def test_code_that_never_imported_is_listed_with_its_cause(tmp_path):
    # A package the grader lacks, or a syntax error: every item failed at
    # import, so the code was never graded and the report says why.
    subs = tmp_path / "subs"
    subs.mkdir()
    reference = REFERENCE.read_text()
    (subs / "scipy_user.py").write_text("import scipy\n" + reference)
    (subs / "unparsable.py").write_text(reference.replace(
        "class SelfAttention", "class SelfAttention(:", 1))
    (subs / "reference.py").write_text(reference)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--out", str(out),
         "--jobs", "2", *sorted(str(p) for p in subs.iterdir())],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    batch = {s.name: s for s in class_report.read_batch(out).submissions}
    assert batch["scipy_user"].not_graded == (
        "imports scipy, a package the grader does not have")
    assert batch["unparsable"].not_graded.startswith(
        "does not parse: SyntaxError")
    assert batch["reference"].not_graded == ""
    section = _report(out).split("could not be graded (student)")[1]
    assert "scipy_user" in section and "unparsable" in section
    assert "reference" not in section.split("</section>")[0]


def test_deduction_rates_name_the_offending_pattern(graded):
    out, _ = graded
    batch = class_report.read_batch(out)
    rates = {r["number"]: r for r in class_report.pass_rates(batch)}
    assert rates["2.pep8"]["passed"] == rates["2.pep8"]["n"] - 1
    section = _report(out).split("id='deductions'")[1]
    assert re.search(r"E\d{3} [^:]+: 1 \(<a href='submissions/"
                     r"pep8_violation/", section)


def test_pass_rates_and_distribution_count_graded_submissions(graded):
    out, _ = graded
    batch = class_report.read_batch(out)
    rates = {r["number"]: r for r in class_report.pass_rates(batch)}
    # 1.2 fails for no_scale x2, the loop, the syntax error
    graded_n = len([s for s in batch.submissions if s.items])
    assert rates["1.2"]["n"] == graded_n
    assert rates["1.2"]["passed"] == graded_n - 4
    page = Page(_report(out))
    bars = [a for a in page.all("rect") if a.get("class") == "bar"]
    # One histogram bar per whole point (0 .. max score), one per item.
    from autograder.rubric import load_rubric
    whole_points = int(load_rubric().max_score) + 1
    assert len(bars) >= whole_points + len([r for r in rates.values()
                                            if r["kind"] == "item"])


def test_a_grader_failure_is_reported_as_the_graders(graded, tmp_path):
    out, _ = graded
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    results = submission_dir(copy, "mask_diagonal") / "results.json"
    data = json.loads(results.read_text())
    data.update(score=0.0, tests=[{"name": "Grading", "score": 0.0,
                                   "max_score": 16.0, "status": "failed",
                                   "output": "Sorry", "visibility":
                                   "visible"}])
    data["extra_data"]["internal_error"] = True
    results.write_text(json.dumps(data))
    (submission_dir(copy, "no_scale") / "results.json").write_text(
        "{ truncated")
    class_report.write_report(copy, {})
    section = _report(copy).split("id='failures'")[1].split("<h3>")[1]
    assert "mask_diagonal" in section and "no_scale" in section
    batch = {s.name: s for s in class_report.read_batch(copy).submissions}
    assert batch["mask_diagonal"].grader_failure
    assert not batch["mask_diagonal"].not_graded


def test_student_text_is_escaped_in_the_report_and_pages(graded):
    out, _ = graded
    pages = [out / "report.html", out / "answers" / "Q1.html",
             submission_dir(out, EVIL) / "feedback.html"]
    for path in pages:
        page = Page(path.read_text())
        assert not [a for a in page.all("img")], path
        assert not any("onerror" in attrs for _, attrs in page.tags), path
        assert len(page.all("script")) <= 2, path  # the report's own two
    q1 = Page((out / "answers" / "Q1.html").read_text())
    # every submission, the seven without a notebook with no answer
    graded_rows = csvsafe.read_dicts(out / "grades.csv")[1]
    assert len([1 for t, _ in q1.tags if t == "h2"]) == len(graded_rows)
    assert f"2 of {len(graded_rows)} submissions answered" in \
        (out / "answers" / "Q1.md").read_text()
    assert EVIL != HOSTILE_NAME and HOSTILE_NAME not in _report(out)


def test_report_command_rewrites_and_refuses_an_empty_folder(
        graded, tmp_path):
    out, _ = graded
    (out / "report.html").unlink()
    done = subprocess.run([sys.executable, "-m", "autograder", "report",
                           str(out)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and (out / "report.html").is_file()
    empty = subprocess.run([sys.executable, "-m", "autograder", "report",
                            str(tmp_path)], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
    assert empty.returncode == 2 and "grades.csv" in empty.stderr


# --------------------------------------------------------------------------
# As a person sees it: headless Chromium

def _chromium(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000",
         *args, url], capture_output=True, text=True, timeout=120)


def _console(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def _dom(path: Path) -> tuple[str, list[str]]:
    done = _chromium(path.as_uri(), "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, _console(done)


@needs_chromium
def test_browser_catches_a_broken_page(tmp_path):
    # The control: a page with a script error is seen as broken.
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>undefinedFunction();</script>"
                    "</body></html>")
    _, console = _dom(page)
    assert any("undefinedFunction" in line for line in console)


@needs_chromium
def test_report_renders_in_chromium_without_console_errors(graded):
    out, _ = graded
    dom, console = _dom(out / "report.html")
    assert console == []
    assert "data-ready=\"1\"" in dom          # the table script ran
    assert not re.search(r"<html[^>]*data-errors", dom)
    page = Page(dom)
    assert len(page.all("svg")) >= 2
    rows = [a for a in page.all("tr") if "data-mistakes" in a]
    assert len(rows) == len(class_report.read_batch(out).submissions)
    assert re.search(r"id=\"shown\">(\d+) of \1 shown<", dom)


@needs_chromium
def test_report_screenshot_shows_the_charts(graded, tmp_path):
    out, _ = graded
    shot = tmp_path / "report.png"
    done = _chromium((out / "report.html").as_uri(),
                     "--window-size=1300,2400", f"--screenshot={shot}")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    import matplotlib.image
    pixels = matplotlib.image.imread(str(shot))[..., :3]
    assert pixels.shape[:2] == (2400, 1300)
    # the bars' colour (#3b78c2) covers a visible area of the page
    bar = (abs(pixels[..., 0] - 0x3b / 255) < 0.02) & \
        (abs(pixels[..., 1] - 0x78 / 255) < 0.02) & \
        (abs(pixels[..., 2] - 0xc2 / 255) < 0.02)
    assert bar.sum() > 5000
    keep = ROOT / "build" / "report-screenshot.png"
    keep.parent.mkdir(exist_ok=True)
    shutil.copy2(shot, keep)      # for a person to look at


@needs_chromium
def test_table_fits_a_laptop_screen(graded):
    out, _ = graded
    probe = out / "report-width.html"
    probe.write_text(_report(out).replace("</body>", """<script>
var box=document.querySelector('.scroll');
document.body.setAttribute('data-fit', box.scrollWidth+' '+box.clientWidth);
</script></body>"""))
    done = _chromium(probe.as_uri(), "--window-size=1366,768", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    wide, shown = map(int, re.search(r'data-fit="(\d+) (\d+)"',
                                     done.stdout).groups())
    assert 0 < wide <= shown          # no sideways scrolling


@pytest.fixture(scope="module")
def anonymised(graded) -> Path:
    """The graded batch's anonymised view (``report --anonymise``)."""
    out, _ = graded
    line = anonymise.write_views(out, {}, class_report.ReportOptions(
        anonymise=True), strict=True)
    assert "anonymised view:" in line
    return out / "anonymised" / class_report.REPORT_NAME


def _page_width(page: Path) -> tuple[int, int]:
    """(the page's width, the window's) in Chromium at 1366 x 768."""
    probe = page.with_name("width-probe.html")
    probe.write_text(page.read_text().replace("</body>", """<script>
document.body.setAttribute('data-fit', document.documentElement.scrollWidth
+' '+document.documentElement.clientWidth);</script></body>"""))
    done = _chromium(probe.as_uri(), "--window-size=1366,768", "--dump-dom")
    probe.unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    assert _console(done) == []
    return tuple(map(int, re.search(r'data-fit="(\d+) (\d+)"',
                                    done.stdout).groups()))


@needs_chromium
def test_both_reports_fit_a_1366_pixel_screen(graded, anonymised):
    out, _ = graded
    for page in (out / "report.html", anonymised):
        wide, shown = _page_width(page)
        assert 0 < wide <= shown <= 1366, page   # no sideways scrolling
    # The control: a page wider than the screen is seen as wider.
    wider = out / "wide.html"
    wider.write_text("<html><body><div style='width:2000px'>x</div>"
                     "</body></html>")
    wide, shown = _page_width(wider)
    assert wide > shown


def test_the_anonymised_report_keeps_the_class_and_drops_the_names(
        graded, anonymised):
    out, _ = graded
    plain, anon = _report(out), anonymised.read_text()
    batch = class_report.read_batch(out)
    for sub in batch.submissions:
        assert f">{sub.name}<" in plain.replace("&lt;", "<") or \
            sub.name == EVIL
        assert f">{sub.name}<" not in anon
    rows = [a for a in Page(anon).all("tr") if "data-mistakes" in a]
    assert len(rows) == len(batch.submissions)
    # The class stays (this batch's mistakes are named like its
    # submissions, so they are withheld here: a student's name is
    # withheld wherever it stands).
    for section in ("Pass rate per item", "Named mistakes", "Similarity",
                    "Deductions"):
        assert section in anon


@needs_chromium
def test_table_sorts_and_filters_in_chromium(graded, tmp_path):
    out, _ = graded
    # The report plus a script that uses its controls as a TA would.
    probe = out / "report-probe.html"
    probe.write_text(_report(out).replace("</body>", """<script>
var sel=document.getElementById('f-mistake');sel.value='no_scale';
sel.dispatchEvent(new Event('change'));
var shown=[].filter.call(document.querySelectorAll('#submissions tbody tr'),
  function(r){return !r.classList.contains('hidden');});
document.body.setAttribute('data-filtered', shown.map(function(r){
  return r.cells[0].getAttribute('data-v');}).join('|'));
sel.value='';sel.dispatchEvent(new Event('change'));
var th=document.querySelector('#submissions th[data-col="1"]');
th.click();th.click();
document.body.setAttribute('data-sorted', [].map.call(
  document.querySelectorAll('#submissions tbody tr'),
  function(r){return r.cells[1].getAttribute('data-v');}).join('|'));
</script></body>"""))
    dom, console = _dom(probe)
    assert console == []
    import html
    filtered = html.unescape(re.search(r'data-filtered="([^"]*)"',
                                       dom).group(1)).split("|")
    assert sorted(filtered) == sorted([EVIL, "no_scale"])
    scores = [float(s) for s in re.search(r'data-sorted="([^"]*)"',
                                          dom).group(1).split("|")]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 2


def test_staff_tools_ship_neither_to_gradescope_nor_to_students(tmp_path):
    # Their optional libraries are no dependency of the deployed grader:
    # kit.release.gradescope.verify would refuse an unpinned import.
    from kit.release import gradescope
    gradescope.assemble(tmp_path / "gs")
    package = tmp_path / "gs" / "autograder"
    shipped = {p.relative_to(package).as_posix()
               for p in package.rglob("*.py")}
    assert "cli.py" in shipped and "sandbox/worker.py" in shipped
    assert not [p for p in shipped if p.startswith("staff/")]
    assert "class_report.py" not in {p.rsplit("/", 1)[-1] for p in shipped}
    assert "markdown_it" not in gradescope.third_party_imports(
        tmp_path / "gs" / "autograder")
